use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", overlap = "buffer")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", overlap = "concurrent")]
async fn report(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
