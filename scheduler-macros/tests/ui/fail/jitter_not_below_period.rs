// The jitter must stay below the period (the shortest gap of a cron schedule):
// otherwise each tick would start in a later tick's slot.
use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1s", jitter = "1h")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(cron = "0 */15 * * * *", jitter = "15m")]
async fn report(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
