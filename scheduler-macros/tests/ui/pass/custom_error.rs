use std::fmt;

use scheduler_core::{Idempotent, JobContext, job};

#[derive(Debug)]
struct SweepError;

impl fmt::Display for SweepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sweep failed")
    }
}

impl std::error::Error for SweepError {}

#[job(every = "1m")]
async fn sweep(_ctx: JobContext) -> Result<(), SweepError> {
    Err(SweepError)
}

// Any error that converts into `BoxError`: a `String`, an `io::Error`, an alias.
#[job(every = "1m")]
async fn text(_ctx: JobContext) -> Result<(), String> {
    Ok(())
}

#[job(every = "1m")]
async fn io(_ctx: JobContext) -> std::io::Result<()> {
    Ok(())
}

fn main() {
    let _: [&dyn Idempotent; 3] = [&sweep, &text, &io];
}
