use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1h", tz = "Europe/Berlin")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
