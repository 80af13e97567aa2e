use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", catch_up = "lastest")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
