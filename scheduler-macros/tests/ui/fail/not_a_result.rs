use scheduler_core::{JobContext, job};

#[job(every = "1m")]
async fn sweep(_ctx: JobContext) -> u32 {
    7
}

#[job(every = "1m")]
async fn counts(_ctx: JobContext) -> Result<u32, String> {
    Ok(7)
}

fn main() {}
