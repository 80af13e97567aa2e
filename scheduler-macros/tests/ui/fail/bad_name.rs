use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", name = "")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", name = "two\nlines")]
async fn alerts(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
