//! A trigger, in one short `READ COMMITTED` transaction: the version row locked
//! first (as every control locks it first), then the job's pauses read, then the
//! trigger and its audit row written. A pause committed before the lock is seen; one
//! asked for meanwhile waits for the lock, so it lands after the trigger: a trigger
//! of a paused job is never written unless asked for as such
//! ([`ControlRequest::while_paused`]).

use scheduler_core::control::stored::{pause_from, trigger_from};
use scheduler_core::control::trigger_action;
use scheduler_core::{ControlRequest, Trigger};
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use super::rows::{Stored, all, one_row};
use crate::error::Error;
use crate::store::PostgresStore;

impl PostgresStore {
    /// [`ControlTables::write_trigger`](scheduler_core::control::ControlTables::write_trigger).
    pub(super) async fn trigger_checked(
        &self,
        req: &ControlRequest,
    ) -> scheduler_core::Result<Trigger> {
        const OP: &str = "trigger a run";
        let fail = |cause| Error::statement(OP, cause);
        let sql = self.control_sql();
        let txn = self.session().begin_read_committed().await.map_err(fail)?;
        let run = |sql: &str, values: Vec<Value>| {
            txn.query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                values,
            ))
        };
        run(&sql.lock_version, Vec::new()).await.map_err(fail)?;
        let paused = run(&sql.job_paused, vec![req.job.clone().into()])
            .await
            .map_err(fail)?;
        // A refusal drops the transaction: rolled back, nothing written.
        let action = trigger_action(req, &all(&paused, OP, pause_from)?)?;
        let values = vec![
            req.job.clone().into(),
            req.node.clone().into(),
            req.by.clone().into(),
            req.why.clone().into(),
            action.as_str().into(),
        ];
        let rows = run(&sql.trigger, values).await.map_err(fail)?;
        let row = one_row(rows, OP)?;
        let trigger = trigger_from(&Stored {
            row: &row,
            operation: OP,
        })?;
        txn.commit().await.map_err(fail)?;
        Ok(trigger)
    }
}
