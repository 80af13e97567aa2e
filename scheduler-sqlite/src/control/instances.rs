//! The instances' heartbeats ([`Controls::heartbeat`](scheduler_core::Controls::heartbeat)):
//! one row per node in `<table>_instances` (migration 5), times in integer
//! microseconds on SQLite's clock, and which nodes' registrations count.

use std::collections::BTreeMap;

use scheduler_core::control::{Heartbeat, InstanceRow};
use sea_orm::TransactionTrait;

use super::rows::{flag, rows};
use crate::error::Result;
use crate::row::{get, time};
use crate::store::SqliteStore;

impl SqliteStore {
    pub(super) async fn beat(&self, beat: &Heartbeat) -> Result<()> {
        const OP: &str = "record a heartbeat";
        let sql = &self.control.instances;
        let values = vec![
            beat.node.clone().into(),
            beat.version.clone().into(),
            beat.started_at.timestamp_micros().into(),
            beat.expiry().num_microseconds().unwrap_or(i64::MAX).into(),
        ];
        let (_turn, txn) = self.begin_write(OP).await?;
        rows(self, &txn, OP, &sql.beat, values).await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))
    }

    pub(super) async fn stop(&self, node: &str) -> Result<()> {
        const OP: &str = "record an instance stopped";
        let sql = &self.control.instances;
        let (_turn, txn) = self.begin_write(OP).await?;
        rows(self, &txn, OP, &sql.stop, vec![node.to_owned().into()]).await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))
    }

    pub(super) async fn instance_rows(&self) -> Result<Vec<InstanceRow>> {
        const OP: &str = "read the instances";
        let sql = &self.control.instances;
        // One read transaction: the rows and the registrations agree.
        let txn = self
            .db
            .begin()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        let found = rows(self, &txn, OP, &sql.read, Vec::new()).await?;
        let by_node = |registered: Vec<sea_orm::QueryResult>| -> Result<_> {
            let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for row in &registered {
                let node: String = get(row, "node", OP)?;
                names.entry(node).or_default().push(get(row, "name", OP)?);
            }
            Ok(names)
        };
        let mut handlers = by_node(rows(self, &txn, OP, &sql.handlers_by_node, Vec::new()).await?)?;
        let mut jobs = by_node(rows(self, &txn, OP, &sql.jobs_by_node, Vec::new()).await?)?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(OP, source))?;
        found
            .iter()
            .map(|row| {
                let node: String = get(row, "node", OP)?;
                Ok(InstanceRow {
                    version: get(row, "version", OP)?,
                    started_at: time(row, "started_at", OP)?,
                    seen_at: time(row, "seen_at", OP)?,
                    expires_at: time(row, "expires_at", OP)?,
                    stopped: flag(row, "stopped", OP)?,
                    handlers: handlers.remove(&node).unwrap_or_default(),
                    jobs: jobs.remove(&node).unwrap_or_default(),
                    node,
                })
            })
            .collect()
    }
}
