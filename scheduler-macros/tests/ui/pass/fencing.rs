use scheduler_core::{BoxError, Duplicate, Idempotent, JobContext, job};

#[job(every = "1m", fencing)]
async fn bare(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m", fencing = true)]
async fn with_true(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(fencing = false, every = "1m")]
async fn with_false(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1m")]
async fn absent(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

fn main() {
    assert_eq!(bare.duplicate(), Duplicate::NeedsFencing);
    assert_eq!(with_true.duplicate(), Duplicate::NeedsFencing);
    assert_eq!(with_false.duplicate(), Duplicate::Harmless);
    assert_eq!(absent.duplicate(), Duplicate::Harmless);
}
