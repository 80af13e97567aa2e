#![deny(missing_docs)]
//! A public job with docs: they go on the generated struct.

pub mod jobs {
    //! The app's jobs.
    use scheduler_core::{BoxError, JobContext, job};

    /// Deletes expired sessions.
    ///
    /// Harmless to run twice.
    #[job(every = "1h")]
    pub async fn sweep(_ctx: JobContext) -> Result<(), BoxError> {
        Ok(())
    }

    /// Visible in the crate only.
    #[job(every = "1h")]
    pub(crate) async fn alerts(_ctx: JobContext) -> Result<(), BoxError> {
        Ok(())
    }
}

/// Registers the jobs.
pub fn register(builder: scheduler_core::SchedulerBuilder) -> scheduler_core::SchedulerBuilder {
    builder.job(jobs::sweep).job(jobs::alerts)
}

fn main() {
    let builder = scheduler_core::Scheduler::builder(scheduler_core::MemoryStore::new());
    let scheduler = register(builder).build();
    assert!(scheduler.is_ok());
}
