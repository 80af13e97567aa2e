//! What every control writes: the bumped control version, with the instant its rows
//! are stamped with, and its audit row.

use scheduler_core::control::{ControlAction, ControlRecord};
use sea_orm::ConnectionTrait;

use scheduler_core::control::stored::record_from;

use super::rows::{Stored, one};
use crate::error::Result;
use crate::row::get;
use crate::store::SqliteStore;

/// A control's version and instant.
pub(super) struct Bumped {
    pub(super) version: i64,
    pub(super) now: i64,
}

impl SqliteStore {
    /// Bumps the control version in `txn`; returns the new version and the instant
    /// (microseconds) the control's rows are stamped with.
    pub(super) async fn bump(
        &self,
        txn: &impl ConnectionTrait,
        operation: &'static str,
    ) -> Result<Bumped> {
        let row = one(self, txn, operation, &self.control.bump, Vec::new()).await?;
        Ok(Bumped {
            version: get(&row, "version", operation)?,
            now: get(&row, "now", operation)?,
        })
    }

    /// Appends the audit row of `action` in `txn`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn audit(
        &self,
        txn: &impl ConnectionTrait,
        operation: &'static str,
        at: &Bumped,
        job: &str,
        node: Option<&str>,
        action: ControlAction,
        by: &str,
        why: &str,
        detail: String,
    ) -> Result<ControlRecord> {
        let values = vec![
            job.to_owned().into(),
            node.map(str::to_owned).into(),
            action.as_str().into(),
            by.to_owned().into(),
            why.to_owned().into(),
            detail.into(),
            at.now.into(),
        ];
        let row = one(self, txn, operation, &self.control.audit, values).await?;
        record_from(&Stored {
            row: &row,
            operation,
        })
    }
}
