use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", catch_up = "all", catch_up_max = 0)]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
