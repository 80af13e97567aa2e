use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", catch_up = "latest", catch_up_max = 3)]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", catch_up_max = 3)]
async fn report(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
