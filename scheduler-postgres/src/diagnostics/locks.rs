//! The sessions that hold or wait for advisory locks: [`advisory_locks`].

use chrono::{DateTime, Utc};
use sea_orm::{DbErr, QueryResult};

use super::first;
use crate::error::{Error, Result};
use crate::row::{get, time};
use crate::store::PostgresStore;

/// The advisory locks of a database, read by [`advisory_locks`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdvisoryLocks {
    /// The database whose advisory locks these are (`current_database()`).
    pub database: String,
    /// The database's clock when the locks were read.
    pub now: DateTime<Utc>,
    /// Granted locks first, longest in their state first.
    pub locks: Vec<AdvisoryLock>,
}

/// One advisory lock held or awaited by one session.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// What `pg_locks` is read for, in errors.
const READ_LOCKS: &str = "read pg_locks";

/// The advisory locks of the current database other than this session's, granted
/// first, longest in their state first.
const LOCKS_SQL: &str = "\
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
/// Behind PgBouncer the sessions are the server connections PgBouncer holds, not its
/// clients: a session lock taken through it pins a server connection.
///
/// # Errors
/// [`Error::Statement`] if a statement fails, [`Error::BadRow`] if a row cannot be
/// read.
pub async fn advisory_locks(store: &PostgresStore) -> Result<AdvisoryLocks> {
    let head = store
        .query(
            READ_LOCKS,
            "SELECT current_database() AS database, now() AS now",
            Vec::new(),
        )
        .await?;
    let head = first(&head, READ_LOCKS)?;
    let rows = store.query(READ_LOCKS, LOCKS_SQL, Vec::new()).await?;
    Ok(AdvisoryLocks {
        database: get(head, "database", READ_LOCKS)?,
        now: time(head, "now", READ_LOCKS)?,
        locks: rows.iter().map(lock_from_row).collect::<Result<_>>()?,
    })
}

fn lock_from_row(row: &QueryResult) -> Result<AdvisoryLock> {
    // oids are unsigned 32-bit; read as bigint, anything else would be a broken row.
    let oid = |col: &str| -> Result<u32> {
        let v: i64 = get(row, col, READ_LOCKS)?;
        u32::try_from(v).map_err(|e| Error::BadRow {
            operation: READ_LOCKS,
            cause: DbErr::Custom(format!("{col} = {v}: {e}")),
        })
    };
    let classid = oid("classid")?;
    let objid = oid("objid")?;
    let objsubid: i32 = get(row, "objsubid", READ_LOCKS)?;
    let (key, key_pair) = advisory_key(classid, objid, objsubid);
    let state: Option<String> = get(row, "state", READ_LOCKS)?;
    let granted: bool = get(row, "granted", READ_LOCKS)?;
    let pinned = granted && state.as_deref().is_some_and(|s| s.starts_with("idle"));
    Ok(AdvisoryLock {
        pid: get(row, "pid", READ_LOCKS)?,
        user: get(row, "user_name", READ_LOCKS)?,
        application_name: get(row, "application_name", READ_LOCKS)?,
        client_addr: get(row, "client_addr", READ_LOCKS)?,
        state,
        state_for_ms: get(row, "state_for_ms", READ_LOCKS)?,
        key,
        key_pair,
        classid,
        objid,
        objsubid,
        mode: get(row, "mode", READ_LOCKS)?,
        granted,
        query: get(row, "query", READ_LOCKS)?,
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
