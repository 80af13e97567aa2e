use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m")]
async fn sweep(_ctx: JobContext, _pool: u32) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
