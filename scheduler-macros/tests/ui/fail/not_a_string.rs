use scheduler_core::{BoxError, JobContext, job};

#[job(every = 30s)]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", scope = node)]
async fn alerts(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every)]
async fn checks(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
