use scheduler_core::{BoxError, JobContext, job};

// Fires once, in 2020: no time is left, as `build()` would say.
#[job(cron = "0 0 0 1 1 * 2020")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
