use scheduler_core::{JobContext, job};

#[job(every = "1m")]
async fn sweep(_ctx: JobContext) {}

fn main() {}
