use std::time::Duration;

use scheduler_core::{BoxError, Idempotent, JobContext, Schedule, Scope, job};

#[job(every = "30s", scope = "cluster")]
async fn sweep(ctx: JobContext) -> Result<(), BoxError> {
    let _ = ctx.tick();
    Ok(())
}

fn main() {
    assert_eq!(sweep.name(), "sweep");
    assert_eq!(sweep.schedule(), Schedule::every(Duration::from_secs(30)));
    assert_eq!(sweep.scope(), Scope::Cluster);
}
