//! `status`: every lease of the lease table, with the last run of its job from the
//! run history when the app keeps one.

use chrono::{DateTime, SecondsFormat, Utc};
use scheduler_postgres::diagnostics;
pub use scheduler_postgres::diagnostics::{LastRun, LeaseState, LeaseStatus};
use scheduler_postgres::{PostgresStore, TableName};
use serde::Serialize;

use crate::columns::{Columns, duration, one_line};
use crate::error::{Error, Result};
use crate::json;

/// What `status` shows. Serialized as the `--json` output; field names are stable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Status {
    /// The database (`current_database()`).
    pub database: String,
    /// The lease table.
    pub table: String,
    /// The run history table, or `None` when the app keeps no history.
    pub history_table: Option<String>,
    /// The database's clock when the status was read.
    pub now: DateTime<Utc>,
    /// Every lease, by name.
    #[serde(serialize_with = "json::rows")]
    pub leases: Vec<LeaseStatus>,
}

/// Reads every lease of `table` and, when the run history table exists, each one's
/// last run (two statements), through `store` ([`diagnostics::lease_status`]).
///
/// # Errors
/// [`Error::NoLeaseTable`] if the table does not exist, [`Error::Query`] if a query
/// fails, [`Error::BadRow`] if a row cannot be read: a column of an unexpected type,
/// or a timestamp set by hand that chrono cannot hold (`'infinity'`), naming the lease.
pub async fn status(store: &PostgresStore, table: &TableName) -> Result<Status> {
    let status = diagnostics::lease_status(store, table)
        .await
        .map_err(Error::read)?
        .ok_or_else(|| Error::NoLeaseTable {
            table: table.to_string(),
        })?;
    Ok(Status {
        database: status.database,
        table: status.table.to_string(),
        history_table: status.history.map(|history| history.to_string()),
        now: status.now,
        leases: status.leases,
    })
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// "EXPIRES IN" as shown: `in 12s`, `expired 3s ago`, `released`.
fn expires_in(lease: &LeaseStatus) -> String {
    match lease.state {
        LeaseState::Held => format!("in {}", duration(lease.expires_in_ms)),
        LeaseState::Expired => format!("expired {} ago", duration(lease.expires_in_ms)),
        // Released, or a state this version does not know.
        _ => lease.state.as_str().to_owned(),
    }
}

impl Status {
    /// The human output: one aligned row per lease.
    pub fn human(&self) -> String {
        if self.leases.is_empty() {
            return format!("no leases in `{}` yet\n", self.table);
        }
        let mut t = Columns::new(&[
            "LEASE", "HOLDER", "TICK", "TOKEN", "EXPIRES", "LAST RUN", "OUTCOME", "ERROR",
        ]);
        for l in &self.leases {
            let (last, outcome, error) = match &l.last_run {
                None => ("-".to_owned(), "-".to_owned(), String::new()),
                Some(r) => (
                    format!(
                        "{} ago on {}",
                        duration((self.now - r.started).num_milliseconds()),
                        r.node
                    ),
                    if r.lease_lost {
                        format!("{} (lease lost)", r.outcome)
                    } else {
                        r.outcome.to_string()
                    },
                    r.error
                        .as_deref()
                        .map(|e| one_line(e, 60))
                        .unwrap_or_default(),
                ),
            };
            t.push(vec![
                l.lease.clone(),
                l.holder.clone(),
                time(l.tick),
                l.token.to_string(),
                expires_in(l),
                last,
                outcome,
                error,
            ]);
        }
        let mut out = t.render();
        if self.history_table.is_none() {
            let history = self.table.clone() + "_runs";
            out.push_str(&format!(
                "\nno run history table `{history}`: last runs are recorded only when the app \
                 registers scheduler_postgres::RunHistory\n"
            ));
        }
        out
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`], which these types never cause.
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}
