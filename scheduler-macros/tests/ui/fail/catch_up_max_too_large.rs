use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1s", catch_up = "all", catch_up_max = 4000000000)]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
