use scheduler_core::{JobContext, job};

#[derive(Debug)]
struct NotAnError;

#[job(every = "1m")]
async fn sweep(_ctx: JobContext) -> Result<(), NotAnError> {
    Err(NotAnError)
}

fn main() {}
