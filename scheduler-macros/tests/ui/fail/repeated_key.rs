use scheduler_core::{BoxError, JobContext, job};

#[job(every = "30s", scope = "node", every = "1m")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
