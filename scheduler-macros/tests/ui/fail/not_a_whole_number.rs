use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", retry = "3")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", catch_up = "all", catch_up_max = -1)]
async fn report(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
