//! A scheduler database as operators see it, as typed rows: every lease of a lease
//! table with its job's last run ([`lease_status`]), and the sessions that hold or
//! wait for advisory locks ([`advisory_locks`]); and the one repair, ending a lease
//! whose holder is gone ([`forget_lease`]). `scheduler-cli` renders them.
//!
//! The statements run like the store's own (each on a connection borrowed for it,
//! unnamed in a transaction of its own behind PgBouncer's transaction pooling), so
//! they work wherever the store works. Only [`forget_lease`] writes, and it deletes
//! nothing: lease rows are kept for their fencing tokens.
//!
//! ```no_run
//! use scheduler_postgres::{PostgresOptions, PostgresStore, diagnostics};
//!
//! # async fn demo() -> scheduler_postgres::Result<()> {
//! let options = PostgresOptions::default().migrate(false);
//! let store = PostgresStore::connect("postgres://app@db/app", options).await?;
//! if let Some(status) = diagnostics::lease_status(&store, store.table()).await? {
//!     for lease in &status.leases {
//!         println!("{} {:?} until {}", lease.lease, lease.state, lease.expires_at);
//!     }
//! }
//! # Ok(())
//! # }
//! ```

use chrono::{DateTime, Utc};
use scheduler_migrations::TableName;
use sea_orm::{DbErr, QueryResult};

use crate::HistoryTable;
use crate::error::{Error, Result};
use crate::row::{OutOfRange, get, time, timestamp_out_of_range};
use crate::store::PostgresStore;

/// Every lease of a lease table, read by [`lease_status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseTableStatus {
    /// The database (`current_database()`).
    pub database: String,
    /// The lease table.
    pub table: TableName,
    /// The run history table, or `None` when the app keeps no history.
    pub history: Option<HistoryTable>,
    /// The database's clock when the status was read.
    pub now: DateTime<Utc>,
    /// Every lease, by name.
    pub leases: Vec<LeaseStatus>,
}

/// One lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStatus {
    /// The lease's name: the job's name, `job:node` for node jobs.
    pub lease: String,
    /// Its holder (of the last acquisition, even once released).
    pub holder: String,
    /// The tick it was last taken for.
    pub tick: DateTime<Utc>,
    /// The fencing token of the last acquisition.
    pub token: i64,
    /// When it was last taken.
    pub taken_at: DateTime<Utc>,
    /// When it expires (or expired), on the database's clock.
    pub expires_at: DateTime<Utc>,
    /// `expires_at - now()` in milliseconds: negative once expired.
    pub expires_in_ms: i64,
    /// Held, expired or released.
    pub state: LeaseState,
    /// When the tick's run completed and released it, if it did.
    pub released_at: Option<DateTime<Utc>>,
    /// The last run recorded for this lease, if any (and if there is a history).
    pub last_run: Option<LastRun>,
}

/// Whether a lease is held now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseState {
    /// Held: a run is under way (or its holder crashed less than a ttl ago).
    Held,
    /// Expired without completing: the run was interrupted, or its holder crashed.
    Expired,
    /// Released by a run that completed its tick.
    Released,
}

impl LeaseState {
    /// `held`, `expired`, `released`.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Held => "held",
            LeaseState::Expired => "expired",
            LeaseState::Released => "released",
        }
    }
}

/// The last recorded run of a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LastRun {
    /// The node it ran on.
    pub node: String,
    /// The tick it ran.
    pub tick: DateTime<Utc>,
    /// When it started.
    pub started: DateTime<Utc>,
    /// When it ended.
    pub finished: DateTime<Utc>,
    /// `succeeded`, `failed` or `cancelled`.
    pub outcome: String,
    /// The error's text, if it failed.
    pub error: Option<String>,
    /// Whether its lease was lost while it ran.
    pub lease_lost: bool,
}

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

/// What [`forget_lease`] found, and what it did.
///
/// Nothing is ever deleted: the lease's row stays, with its fencing token, in every
/// case (see [`forget_lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Forgotten {
    /// The lease was held and `force` ended it: its expiry is now the database's
    /// `now()`, so the next take of the name wins, with a greater fencing token.
    Ended {
        /// The holder whose lease was ended.
        holder: String,
        /// Its fencing token.
        token: i64,
        /// Its new expiry: the database's `now()`.
        expired_at: DateTime<Utc>,
    },
    /// The lease was not held (expired or released): nothing was written. The next
    /// take of the name wins already.
    NotHeld {
        /// The holder of its last acquisition.
        holder: String,
        /// The fencing token of its last acquisition.
        token: i64,
        /// [`LeaseState::Expired`] or [`LeaseState::Released`].
        state: LeaseState,
        /// When it expired, on the database's clock.
        expired_at: DateTime<Utc>,
    },
    /// Refused: the lease is held and unexpired, and `force` was not given. Nothing
    /// was written.
    Held {
        /// Its holder.
        holder: String,
        /// Its holder's fencing token.
        token: i64,
        /// When it expires unless renewed, on the database's clock.
        until: DateTime<Utc>,
    },
    /// The table has no lease of that name: nothing was written.
    Missing,
}

/// What the lease table's rows are read for, in errors.
const READ_LEASES: &str = "read the lease table";
/// What [`forget_lease`]'s statement is for, in errors.
const FORGET_LEASE: &str = "forget a lease";
/// What `pg_locks` is read for, in errors.
const READ_LOCKS: &str = "read pg_locks";

/// Reads every lease of `table` and, when its run history table exists, each one's
/// last run (two statements). `None` when the database has no table `table`.
///
/// `table` need not be the store's own: an operator's tool may look at any lease
/// table on the store's pool.
///
/// # Errors
/// [`Error::Statement`] if a statement fails, [`Error::BadRow`] if a row cannot be
/// read: a column of an unexpected type, or a timestamp set by hand that chrono
/// cannot hold (`'infinity'`), naming the lease.
pub async fn lease_status(
    store: &PostgresStore,
    table: &TableName,
) -> Result<Option<LeaseTableStatus>> {
    let history = HistoryTable::for_leases(table);
    let rows = store
        .query(
            READ_LEASES,
            "SELECT to_regclass($1) IS NOT NULL AS leases, to_regclass($2) IS NOT NULL AS history, \
                    now() AS now, current_database() AS database",
            vec![table.quoted().into(), history.quoted().into()],
        )
        .await?;
    let row = first(&rows, READ_LEASES)?;
    if !get::<bool>(row, "leases", READ_LEASES)? {
        return Ok(None);
    }
    let history = get::<bool>(row, "history", READ_LEASES)?.then_some(history);
    let now = time(row, "now", READ_LEASES)?;
    let database = get(row, "database", READ_LEASES)?;
    let rows = store
        .query(
            READ_LEASES,
            &status_sql(table, history.as_ref()),
            Vec::new(),
        )
        .await?;
    let leases = rows
        .iter()
        .map(|row| lease_from_row(row, history.is_some()))
        .collect::<Result<_>>()?;
    Ok(Some(LeaseTableStatus {
        database,
        table: table.clone(),
        history,
        now,
        leases,
    }))
}

/// Ends the lease `name` of `table` when its holder is gone: a lease held (by the
/// database's clock: unreleased and `expires_at > now()`) is refused
/// ([`Forgotten::Held`], with its holder and expiry) unless `force`, which expires
/// it at `now()` ([`Forgotten::Ended`]); a lease expired or released is left as it is
/// ([`Forgotten::NotHeld`]); a name without a row is [`Forgotten::Missing`]. `None`
/// when the database has no table `table` (read first, by a statement of its own).
///
/// **The row is never deleted**, because of the fencing token. A take inserts a
/// missing name's row with token 1 and adds 1 to an existing row's token, so a
/// deleted row would restart its name's tokens at 1: a holder of the old token 7
/// whose writes go to a system that refuses any token lower than the highest it has
/// seen would then be let through, and the new holder's token 1 refused. Tokens must
/// keep growing for a name ([`FencingToken`](scheduler_core::FencingToken)), so
/// forgetting a lease ends its holder's claim and keeps the row: the next take finds
/// it free and writes token + 1. A released row also keeps its completed tick from
/// running again. An expired row costs one row of the table and nothing else.
///
/// The decision and the write are one statement: the expiry is set only by an
/// `UPDATE … WHERE name = $1 AND force AND <held>`, so a lease taken after the row
/// was read can never be ended unforced. With `force`, the holder ended is the one
/// holding the row when the `UPDATE` locks it (a takeover or renewal meanwhile is
/// ended too, and reported); a row released meanwhile is read again.
///
/// `force` ends the claim, not the holder: its fenced writes
/// ([`PostgresStore::fenced`]) are refused from then on, but an instance still running
/// renews the lease back unless another takes it first. Use it for holders known to
/// be gone (a crashed instance with a long ttl).
///
/// # Errors
/// [`Error::Statement`] if a statement fails, [`Error::BadRow`] if the row cannot be
/// read: a column of an unexpected type, or an expiry set by hand that chrono cannot
/// hold (`'infinity'`).
///
/// # Cancel safety
/// Dropping the future may leave the statement running to its end: it either ends
/// the lease or does not, atomically.
pub async fn forget_lease(
    store: &PostgresStore,
    table: &TableName,
    name: &str,
    force: bool,
) -> Result<Option<Forgotten>> {
    let exists = store
        .query(
            FORGET_LEASE,
            "SELECT to_regclass($1) IS NOT NULL AS leases",
            vec![table.quoted().into()],
        )
        .await?;
    if !get::<bool>(first(&exists, FORGET_LEASE)?, "leases", FORGET_LEASE)? {
        return Ok(None);
    }
    let sql = forget_sql(table);
    // Forced, a row released (or expired) between the statement's snapshot and its
    // lock reads as held but was not ended: the next statement's snapshot sees it
    // free. Three attempts, then the row is reported as the last one saw it.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let rows = store
            .query(FORGET_LEASE, &sql, vec![name.into(), force.into()])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(Some(Forgotten::Missing));
        };
        if let Some(token) = get::<Option<i64>>(row, "ended_token", FORGET_LEASE)? {
            return Ok(Some(Forgotten::Ended {
                holder: get(row, "ended_holder", FORGET_LEASE)?,
                token,
                expired_at: time(row, "ended_at", FORGET_LEASE)?,
            }));
        }
        let held = get::<bool>(row, "held", FORGET_LEASE)?;
        if held && force && attempts < 3 {
            continue;
        }
        let holder = get(row, "holder", FORGET_LEASE)?;
        let token = get(row, "token", FORGET_LEASE)?;
        let expires_at = time(row, "expires_at", FORGET_LEASE)?;
        return Ok(Some(if held {
            Forgotten::Held {
                holder,
                token,
                until: expires_at,
            }
        } else {
            Forgotten::NotHeld {
                holder,
                token,
                state: match get::<bool>(row, "released", FORGET_LEASE)? {
                    true => LeaseState::Released,
                    false => LeaseState::Expired,
                },
                expired_at: expires_at,
            }
        }));
    }
}

/// `forget_lease`'s one statement (`$1` the name, `$2` force): the row as the
/// statement's snapshot saw it, and the holder the `UPDATE` ended, if it did.
///
/// The `UPDATE` re-checks its condition on the row it locks (a row changed since the
/// snapshot is read again), so `force` and being held decide together, on one row
/// version; unforced, it matches nothing and locks nothing.
fn forget_sql(table: &TableName) -> String {
    let t = table.quoted();
    format!(
        "WITH found AS ( \
           SELECT holder, token, expires_at, released_at IS NOT NULL AS released, \
                  released_at IS NULL AND expires_at > now() AS held \
           FROM {t} WHERE name = $1 \
         ), ended AS ( \
           UPDATE {t} SET expires_at = now() \
           WHERE name = $1 AND $2::boolean AND released_at IS NULL AND expires_at > now() \
           RETURNING holder, token, expires_at \
         ) \
         SELECT f.holder, f.token, f.expires_at, f.released, f.held, \
                e.holder AS ended_holder, e.token AS ended_token, e.expires_at AS ended_at \
         FROM found f LEFT JOIN ended e ON true"
    )
}

/// The lease columns the status reads, `expires_in_ms` computed on the server's clock.
/// An infinite expiry (set by hand) cannot be subtracted from; it is refused when read
/// back ([`read_time`]), not here, where the error could not name the lease.
const LEASE_COLUMNS: &str = "l.name, l.holder, l.tick, l.token, l.taken_at, l.expires_at, \
    l.released_at, \
    CASE WHEN isfinite(l.expires_at) \
         THEN (extract(epoch FROM l.expires_at - now()) * 1000)::bigint \
    END AS expires_in_ms";

/// The lease query, joined with each lease's last run when there is a history.
///
/// A cluster job's runs carry the lease's name as their job; a node job's lease is
/// `job:node`, and the job name may itself hold `:`. So every prefix of the name
/// ending before a `:` is a candidate job (matched with its node), and each candidate
/// is one probe of the `(job, started DESC)` index.
fn status_sql(table: &TableName, history: Option<&HistoryTable>) -> String {
    let t = table.quoted();
    let Some(history) = history else {
        return format!("SELECT {LEASE_COLUMNS} FROM {t} l ORDER BY l.name");
    };
    let runs = history.quoted();
    format!(
        "SELECT {LEASE_COLUMNS}, lr.node AS run_node, lr.tick AS run_tick, \
                lr.started AS run_started, lr.finished AS run_finished, \
                lr.outcome AS run_outcome, lr.error AS run_error, \
                lr.lease_lost AS run_lease_lost \
         FROM {t} l \
         LEFT JOIN LATERAL ( \
           SELECT r.* \
           FROM generate_series(1, cardinality(string_to_array(l.name, ':'))) AS p(i) \
           CROSS JOIN LATERAL ( \
             SELECT r.node, r.tick, r.started, r.finished, r.outcome, r.error, r.lease_lost \
             FROM {runs} r \
             WHERE r.job = array_to_string((string_to_array(l.name, ':'))[1:p.i], ':') \
               AND (p.i = cardinality(string_to_array(l.name, ':')) \
                    OR r.job || ':' || r.node = l.name) \
             ORDER BY r.started DESC LIMIT 1 \
           ) r \
           ORDER BY r.started DESC LIMIT 1 \
         ) lr ON true \
         ORDER BY l.name"
    )
}

fn lease_from_row(row: &QueryResult, has_history: bool) -> Result<LeaseStatus> {
    let lease: String = get(row, "name", READ_LEASES)?;
    let tick = read_time(row, "tick", &lease, "tick")?;
    let taken_at = read_time(row, "taken_at", &lease, "taken_at")?;
    let expires_at = read_time(row, "expires_at", &lease, "expires_at")?;
    let released_at: Option<DateTime<Utc>> = read_time(row, "released_at", &lease, "released_at")?;
    let expires_in_ms: i64 = get(row, "expires_in_ms", READ_LEASES)?;
    let state = if released_at.is_some() {
        LeaseState::Released
    } else if expires_in_ms > 0 {
        LeaseState::Held
    } else {
        LeaseState::Expired
    };
    let last_run = match has_history {
        false => None,
        true => match read_time(row, "run_started", &lease, "the started of its last run")? {
            None => None,
            Some(started) => Some(LastRun {
                node: get(row, "run_node", READ_LEASES)?,
                tick: read_time(row, "run_tick", &lease, "the tick of its last run")?,
                started,
                finished: read_time(row, "run_finished", &lease, "the finished of its last run")?,
                outcome: get(row, "run_outcome", READ_LEASES)?,
                error: get(row, "run_error", READ_LEASES)?,
                lease_lost: get(row, "run_lease_lost", READ_LEASES)?,
            }),
        },
    };
    Ok(LeaseStatus {
        lease,
        holder: get(row, "holder", READ_LEASES)?,
        tick,
        token: get(row, "token", READ_LEASES)?,
        taken_at,
        expires_at,
        expires_in_ms,
        state,
        released_at,
        last_run,
    })
}

/// Reads the `timestamptz` column `col` of `lease`'s row as `T` (a `DateTime<Utc>`,
/// or an `Option` of one); `label` names the column in the error.
///
/// A value beyond chrono's range set by hand would panic in sqlx's decoding, so its
/// range is checked first.
fn read_time<T: sea_orm::TryGetable>(
    row: &QueryResult,
    col: &str,
    lease: &str,
    label: &str,
) -> Result<T> {
    if let Some(beyond) = timestamp_out_of_range(row, col) {
        let value = match beyond {
            OutOfRange::Infinity => "infinity, outside the range of timestamps this tool can show",
            OutOfRange::MinusInfinity => {
                "-infinity, outside the range of timestamps this tool can show"
            }
            OutOfRange::Future | OutOfRange::Past => {
                "a timestamp outside the range this tool can show (years -262143 to 262142)"
            }
        };
        return Err(Error::BadRow {
            operation: READ_LEASES,
            cause: DbErr::Custom(format!("lease {lease:?}: {label} holds {value}")),
        });
    }
    get(row, col, READ_LEASES)
}

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

/// The one row a statement of one row returned.
fn first<'r>(rows: &'r [QueryResult], operation: &'static str) -> Result<&'r QueryResult> {
    rows.first().ok_or_else(|| Error::BadRow {
        operation,
        cause: DbErr::RecordNotFound("no row".to_owned()),
    })
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
