use std::rc::Rc;

use scheduler_core::{BoxError, JobContext, job};

#[job(every = "1m")]
async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
    let shared = Rc::new(1);
    std::future::ready(()).await;
    drop(shared);
    Ok(())
}

fn main() {}
