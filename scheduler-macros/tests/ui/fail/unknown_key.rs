use scheduler_core::{BoxError, JobContext, job};

#[job(evry = "30s")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "30s", deadline = "1m")]
async fn alerts(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
