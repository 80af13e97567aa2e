//! Every lease of a lease table, with its job's last run: [`lease_status`].

use chrono::{DateTime, Utc};
use scheduler_core::Outcome;
use scheduler_migrations::TableName;
use sea_orm::{DbErr, QueryResult};

use super::first;
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
    /// How it ended ([`Outcome::Unknown`] for a word a newer version stored).
    pub outcome: Outcome,
    /// The error's text, if it failed.
    pub error: Option<String>,
    /// Whether its lease was lost while it ran.
    pub lease_lost: bool,
}

/// What the lease table's rows are read for, in errors.
const READ_LEASES: &str = "read the lease table";

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
                outcome: Outcome::from_stored(&get::<String>(row, "run_outcome", READ_LEASES)?),
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
