// `catch_up = "1m"` is the window already: `catch_up_window` goes with a policy word.
use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m", catch_up = "1m", catch_up_window = "10m")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
