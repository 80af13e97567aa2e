use scheduler_core::{BoxError, JobContext, job};

struct Jobs;

impl Jobs {
    #[job(every = "1m")]
    async fn sweep(&self, _ctx: JobContext) -> Result<(), BoxError> {
        Ok(())
    }
}

fn main() {}
