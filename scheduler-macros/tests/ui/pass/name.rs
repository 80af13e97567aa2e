use scheduler_core::{BoxError, Idempotent, JobContext, job};

#[job(every = "1h", name = "nightly sweep: expired sessions")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

// A raw identifier names the job without its `r#`.
#[job(every = "1h")]
async fn r#match(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {
    assert_eq!(sweep.name(), "nightly sweep: expired sessions");
    assert_eq!(r#match.name(), "match");
}
