#![deny(warnings)]
// Lint levels apply to the struct and the function, `cfg` to everything generated.

use scheduler_core::{BoxError, Idempotent, JobContext, job};

#[job(every = "1m")]
#[allow(unused_variables)]
async fn sweep(ctx: JobContext) -> Result<(), BoxError> {
    let unused = 1;
    Ok(())
}

#[cfg(any())]
#[job(every = "1m")]
async fn never_compiled(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m")]
#[cfg(any())]
async fn never_compiled_either(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m")]
#[cfg(all())]
#[inline]
async fn compiled(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {
    let _: [&dyn Idempotent; 2] = [&sweep, &compiled];
}

/// Superseded by `compiled`.
#[deprecated(note = "use `compiled`")]
#[job(every = "1m")]
async fn old(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}
