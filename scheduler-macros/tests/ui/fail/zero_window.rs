use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", catch_up = "0ms")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", catch_up = "all", catch_up_window = "0s")]
async fn report(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
