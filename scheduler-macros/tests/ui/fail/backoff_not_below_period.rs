// A retry backoff must stay below the period; when not given it is 1s, and the
// error is on `retry`.
use scheduler_core::{BoxError, JobContext, job};

#[job(every = "10s", retry = 3, retry_backoff = "10s")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "500ms", retry = 3)]
async fn report(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
