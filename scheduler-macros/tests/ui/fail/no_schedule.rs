use scheduler_core::{BoxError, JobContext, job};

#[job(scope = "node")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job]
async fn alerts(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
