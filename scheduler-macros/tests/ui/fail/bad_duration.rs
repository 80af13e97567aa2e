use scheduler_core::{BoxError, JobContext, job};

#[job(every = "30x")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
