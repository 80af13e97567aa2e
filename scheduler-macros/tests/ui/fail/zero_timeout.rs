use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", timeout = "0s")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
