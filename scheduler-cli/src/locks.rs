//! `locks`: which sessions hold (or wait for) advisory locks in this database.
//!
//! A session-level advisory lock lives as long as its session: in a pool, that is a
//! connection nobody else can use. Its holder shows as `idle` in
//! `pg_stat_activity`, which is why nobody suspects it; this command flags it.

use chrono::{DateTime, Utc};
use scheduler_postgres::PostgresStore;
use scheduler_postgres::diagnostics;
pub use scheduler_postgres::diagnostics::AdvisoryLock;
use serde::Serialize;

use crate::columns::{Columns, duration, one_line};
use crate::error::{Error, Result};
use crate::json;

/// What `locks` shows. Serialized as the `--json` output; field names are stable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Locks {
    /// The database whose advisory locks these are (`current_database()`).
    pub database: String,
    /// The database's clock when the locks were read.
    pub now: DateTime<Utc>,
    /// Granted locks first, longest in their state first.
    #[serde(serialize_with = "json::rows")]
    pub locks: Vec<AdvisoryLock>,
}

/// Reads the advisory locks of the current database, with their sessions (two
/// statements), through `store` ([`diagnostics::advisory_locks`]). Sessions of other
/// users show their query only to superusers and members of `pg_read_all_stats`.
///
/// # Errors
/// [`Error::Query`] if a query fails, [`Error::BadRow`] if a row cannot be read.
pub async fn locks(store: &PostgresStore) -> Result<Locks> {
    let locks = diagnostics::advisory_locks(store)
        .await
        .map_err(Error::read)?;
    Ok(Locks {
        database: locks.database,
        now: locks.now,
        locks: locks.locks,
    })
}

/// The key as shown: `42`, or `1,2` for two int keys.
fn key_text(lock: &AdvisoryLock) -> String {
    match (lock.key, lock.key_pair) {
        (Some(key), _) => key.to_string(),
        (None, Some([a, b])) => format!("{a},{b}"),
        (None, None) => format!("{}/{}", lock.classid, lock.objid),
    }
}

impl Locks {
    /// The human output: one aligned row per lock, then a warning per pinned
    /// connection.
    pub fn human(&self) -> String {
        if self.locks.is_empty() {
            return format!("no advisory locks in database `{}`\n", self.database);
        }
        let mut t = Columns::new(&[
            "PID",
            "APPLICATION",
            "CLIENT",
            "USER",
            "STATE",
            "FOR",
            "KEY",
            "MODE",
            "GRANTED",
            "PINNED",
            "QUERY",
        ]);
        let or_dash = |v: &Option<String>| match v.as_deref() {
            None | Some("") => "-".to_owned(),
            Some(v) => v.to_owned(),
        };
        for l in &self.locks {
            t.push(vec![
                l.pid.to_string(),
                or_dash(&l.application_name),
                or_dash(&l.client_addr),
                or_dash(&l.user),
                or_dash(&l.state),
                l.state_for_ms
                    .map(duration)
                    .unwrap_or_else(|| "-".to_owned()),
                key_text(l),
                l.mode.clone(),
                if l.granted { "yes" } else { "waiting" }.to_owned(),
                if l.pinned { "PINNED" } else { "-" }.to_owned(),
                l.query
                    .as_deref()
                    .map(|q| one_line(q, 60))
                    .unwrap_or_default(),
            ]);
        }
        let mut out = t.render();
        let pinned: Vec<&AdvisoryLock> = self.locks.iter().filter(|l| l.pinned).collect();
        if !pinned.is_empty() {
            out.push('\n');
        }
        for l in pinned {
            out.push_str(&format!(
                "warning: pid {} ({}) has been {} for {} and holds advisory lock {}: a session \
                 lock pins its pooled connection until it is unlocked or the session ends\n",
                l.pid,
                or_dash(&l.application_name),
                or_dash(&l.state),
                l.state_for_ms
                    .map(duration)
                    .unwrap_or_else(|| "?".to_owned()),
                key_text(l),
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
