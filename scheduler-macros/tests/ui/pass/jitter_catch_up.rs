use std::time::Duration;

use scheduler_core::{BoxError, Idempotent, JobContext, job};

#[job(every = "1h30m", jitter = "1s500ms", catch_up = "10m")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "2d", jitter = "0s")]
async fn zeros(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "500ms")]
async fn defaults(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {
    assert_eq!(sweep.jitter(), Duration::from_millis(1500));
    assert_eq!(sweep.catch_up(), Some(Duration::from_secs(600)));
    assert_eq!(zeros.jitter(), Duration::ZERO);
    assert_eq!(zeros.catch_up(), None);
    assert_eq!(defaults.jitter(), Duration::ZERO);
    assert_eq!(defaults.catch_up(), None);
}
