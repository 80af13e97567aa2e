use scheduler_core::{BoxError, job};

#[job(every = "1m")]
async fn sweep() -> Result<(), BoxError> {
    Ok(())
}

fn main() {}
