use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", retry = 0)]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
