use scheduler_core::{BoxError, Idempotent, job};

// The parameter may be `_` and its type a path ending in `JobContext`.
#[job(every = "1m")]
async fn ignored(_: scheduler_core::JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m")]
async fn mutable(mut ctx: ::scheduler_core::JobContext) -> Result<(), BoxError> {
    ctx = ctx.clone();
    let _ = ctx.job();
    Ok(())
}

fn main() {
    let _: [&dyn Idempotent; 2] = [&ignored, &mutable];
}
