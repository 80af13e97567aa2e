//! The control state a poll reads, in one read transaction: the version, every
//! pause, the resumes and the schedules changed since a version (every schedule
//! from scratch, unless left out) and the open triggers.

use scheduler_core::ControlState;
use scheduler_core::control::stored::{pause_from, resume_from, schedule_from, trigger_from};
use sea_orm::TransactionTrait;

use super::rows::{all, one, rows};
use super::schedules;
use crate::error::Result;
use crate::row::get;
use crate::store::SqliteStore;

impl SqliteStore {
    /// What a poll from version `since` reads (`None`: from scratch), the dynamic
    /// schedules left out of a read from scratch unless `with_schedules` (an
    /// instance that loads them as they come due reads them apart).
    pub(super) async fn control_state(
        &self,
        since: Option<i64>,
        with_schedules: bool,
    ) -> Result<ControlState> {
        const OP: &str = "poll the controls";
        let txn = self
            .db
            .begin()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        let version = get(
            &one(self, &txn, OP, &self.control.version, Vec::new()).await?,
            "version",
            OP,
        )?;
        let after = since.unwrap_or(i64::MIN);
        let paused = rows(self, &txn, OP, &self.control.paused, Vec::new()).await?;
        let resumed = rows(self, &txn, OP, &self.control.resumed, vec![after.into()]).await?;
        let triggers = rows(self, &txn, OP, &self.control.open_triggers, Vec::new()).await?;
        let schedules = match since {
            _ if !with_schedules => Vec::new(),
            Some(since) => {
                let values = vec![since.into()];
                let found = rows(self, &txn, OP, &self.control.changed_schedules, values).await?;
                all(&found, OP, schedule_from)?
            }
            None => schedules::every_schedule(self, &txn, OP).await?,
        };
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        Ok(ControlState {
            version,
            paused: all(&paused, OP, pause_from)?,
            resumed: all(&resumed, OP, resume_from)?,
            triggers: all(&triggers, OP, trigger_from)?,
            schedules,
        })
    }
}
