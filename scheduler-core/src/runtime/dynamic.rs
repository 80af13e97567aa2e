//! Dynamic schedules: a [`ScheduleRow`] bound to a registered [`Handler`] is a job.

use std::sync::Arc;

use crate::control::ScheduleRow;
use crate::error::{BoxError, Result};
use crate::job::{Handler, Idempotent, JobContext, Scope};
use crate::policy::Policy;
use crate::schedule::Schedule;

/// The job a dynamic schedule's row defines.
pub(crate) struct DynamicJob {
    name: String,
    schedule: Schedule,
    scope: Scope,
    policy: Policy,
    handler: Arc<dyn Handler>,
    args: Arc<str>,
}

impl DynamicJob {
    /// The job of `row`, run by `handler`.
    ///
    /// # Errors
    /// What [`ScheduleRow::parse`] finds wrong with the row.
    pub(crate) fn new(row: &ScheduleRow, handler: Arc<dyn Handler>) -> Result<Self> {
        let parsed = row.parse()?;
        Ok(Self {
            name: row.name.clone(),
            schedule: parsed.schedule,
            scope: row.scope,
            policy: parsed.policy,
            handler,
            args: row.args.as_str().into(),
        })
    }

    pub(crate) fn policy_of(&self) -> Policy {
        self.policy
    }
}

#[async_trait::async_trait]
impl Idempotent for DynamicJob {
    fn name(&self) -> &str {
        &self.name
    }

    fn schedule(&self) -> Schedule {
        self.schedule.clone()
    }

    fn scope(&self) -> Scope {
        self.scope
    }

    fn policy(&self) -> Policy {
        self.policy
    }

    async fn run(&self, ctx: JobContext) -> std::result::Result<(), BoxError> {
        self.handler.run(ctx, Arc::clone(&self.args)).await
    }
}
