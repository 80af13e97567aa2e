//! `locks`: which sessions hold (or wait for) advisory locks in this database.
//!
//! A session-level advisory lock lives as long as its session: in a pool, that is a
//! connection nobody else can use. Its holder shows as `idle` in
//! `pg_stat_activity`, which is why nobody suspects it; this command flags it.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, QueryResult, Statement};
use serde::Serialize;

use crate::columns::{Columns, duration, one_line};
use crate::error::{Error, Result};

/// What `locks` shows. Serialized as the `--json` output; field names are stable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Locks {
    /// The database whose advisory locks these are (`current_database()`).
    pub database: String,
    /// The database's clock when the locks were read.
    pub now: DateTime<Utc>,
    /// Granted locks first, longest in their state first.
    pub locks: Vec<AdvisoryLock>,
}

/// One advisory lock held or awaited by one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AdvisoryLock {
    /// The session's backend process id.
    pub pid: i32,
    /// The session's user.
    pub user: Option<String>,
    /// The session's `application_name`.
    pub application_name: Option<String>,
    /// The client's address (`None` over a Unix socket).
    pub client_addr: Option<String>,
    /// The session's state: `active`, `idle`, `idle in transaction`, …
    pub state: Option<String>,
    /// How long the session has been in that state, in milliseconds.
    pub state_for_ms: Option<i64>,
    /// The key of `pg_advisory_lock(bigint)` (`objsubid` 1).
    pub key: Option<i64>,
    /// The keys of `pg_advisory_lock(int, int)` (`objsubid` 2).
    pub key_pair: Option<[i32; 2]>,
    /// `pg_locks.classid`: the key's high 32 bits (or the first int key).
    pub classid: u32,
    /// `pg_locks.objid`: the key's low 32 bits (or the second int key).
    pub objid: u32,
    /// `pg_locks.objsubid`: 1 for a bigint key, 2 for two int keys.
    pub objsubid: i32,
    /// `ExclusiveLock` or `ShareLock`.
    pub mode: String,
    /// Held (`true`) or waited for (`false`).
    pub granted: bool,
    /// The session's last (or current) statement.
    pub query: Option<String>,
    /// Held by an idle session: a connection pinned by a session-level lock (or by an
    /// open, idle transaction).
    pub pinned: bool,
}

const QUERY: &str = "\
SELECT l.pid, a.usename AS user_name, a.application_name, host(a.client_addr) AS client_addr, \
       a.state, greatest(0, (extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::bigint) AS state_for_ms, \
       l.classid::bigint AS classid, l.objid::bigint AS objid, l.objsubid::int AS objsubid, \
       l.mode, l.granted, a.query \
FROM pg_locks l \
LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
WHERE l.locktype = 'advisory' \
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
  AND l.pid IS DISTINCT FROM pg_backend_pid() \
ORDER BY l.granted DESC, a.state_change NULLS LAST, l.pid, l.classid, l.objid";

/// Reads the advisory locks of the current database, with their sessions (two
/// statements). Sessions of other users show their query only to superusers and
/// members of `pg_read_all_stats`.
///
/// # Errors
/// [`Error::Query`] if a query fails.
pub async fn locks(db: &DatabaseConnection) -> Result<Locks> {
    const WHAT: &str = "read pg_locks";
    let head = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_database() AS database, now() AS now",
        ))
        .await
        .map_err(|source| Error::Query { what: WHAT, source })?
        .ok_or(Error::BadRow {
            what: WHAT,
            source: sea_orm::DbErr::RecordNotFound("no row".to_owned()),
        })?;
    let rows = db
        .query_all_raw(Statement::from_string(DbBackend::Postgres, QUERY))
        .await
        .map_err(|source| Error::Query { what: WHAT, source })?;
    Ok(Locks {
        database: get(&head, "database")?,
        now: get(&head, "now")?,
        locks: rows.iter().map(lock_from_row).collect::<Result<_>>()?,
    })
}

fn get<T: sea_orm::TryGetable>(row: &QueryResult, col: &str) -> Result<T> {
    row.try_get::<T>("", col).map_err(|source| Error::BadRow {
        what: "read pg_locks",
        source,
    })
}

fn lock_from_row(row: &QueryResult) -> Result<AdvisoryLock> {
    // oids are unsigned 32-bit; read as bigint, anything else would be a broken row.
    let oid = |col: &str| -> Result<u32> {
        let v: i64 = get(row, col)?;
        u32::try_from(v).map_err(|e| Error::BadRow {
            what: "read pg_locks",
            source: sea_orm::DbErr::Custom(format!("{col} = {v}: {e}")),
        })
    };
    let classid = oid("classid")?;
    let objid = oid("objid")?;
    let objsubid: i32 = get(row, "objsubid")?;
    let (key, key_pair) = advisory_key(classid, objid, objsubid);
    let state: Option<String> = get(row, "state")?;
    let granted: bool = get(row, "granted")?;
    let pinned = granted && state.as_deref().is_some_and(|s| s.starts_with("idle"));
    Ok(AdvisoryLock {
        pid: get(row, "pid")?,
        user: get(row, "user_name")?,
        application_name: get(row, "application_name")?,
        client_addr: get(row, "client_addr")?,
        state,
        state_for_ms: get(row, "state_for_ms")?,
        key,
        key_pair,
        classid,
        objid,
        objsubid,
        mode: get(row, "mode")?,
        granted,
        query: get(row, "query")?,
        pinned,
    })
}

/// The key as the locking call spelled it: `pg_advisory_lock(bigint)` stores the high
/// and low 32 bits in `classid` and `objid` (`objsubid` 1); `pg_advisory_lock(int,
/// int)` stores the two keys (`objsubid` 2).
fn advisory_key(classid: u32, objid: u32, objsubid: i32) -> (Option<i64>, Option<[i32; 2]>) {
    if objsubid == 2 {
        (None, Some([classid as i32, objid as i32]))
    } else {
        (
            Some(((u64::from(classid) << 32) | u64::from(objid)) as i64),
            None,
        )
    }
}

impl AdvisoryLock {
    /// The key as shown: `42`, or `1,2` for two int keys.
    pub fn key_text(&self) -> String {
        match (self.key, self.key_pair) {
            (Some(key), _) => key.to_string(),
            (None, Some([a, b])) => format!("{a},{b}"),
            (None, None) => format!("{}/{}", self.classid, self.objid),
        }
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
                l.key_text(),
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
                l.key_text(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_back_as_the_caller_wrote_them() {
        // pg_advisory_lock(42), pg_advisory_lock(-1), pg_advisory_lock(1, -2).
        assert_eq!(advisory_key(0, 42, 1), (Some(42), None));
        assert_eq!(advisory_key(u32::MAX, u32::MAX, 1), (Some(-1), None));
        assert_eq!(advisory_key(1, u32::MAX - 1, 2), (None, Some([1, -2])));
    }
}
