//! `status`: every lease of the lease table, with the last run of its job from the
//! run history when the app keeps one.

use chrono::{DateTime, SecondsFormat, Utc};
use scheduler_postgres::{HistoryTable, TableName};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, QueryResult, Statement};
use serde::Serialize;

use crate::columns::{Columns, duration, one_line};
use crate::error::{Error, Result};

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
    pub leases: Vec<LeaseStatus>,
}

/// One lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

/// Reads every lease of `table` and, when the run history table exists, each one's
/// last run (two statements).
///
/// # Errors
/// [`Error::NoLeaseTable`] if the table does not exist, [`Error::Query`] if a query
/// fails, [`Error::BadRow`] if a row cannot be read: a column of an unexpected type,
/// or a timestamp set by hand that chrono cannot hold (`'infinity'`), naming the lease.
pub async fn status(db: &DatabaseConnection, table: &TableName) -> Result<Status> {
    const WHAT: &str = "read the lease table";
    let history = HistoryTable::for_leases(table);
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT to_regclass($1) IS NOT NULL AS leases, to_regclass($2) IS NOT NULL AS history, \
                    now() AS now, current_database() AS database",
            [table.quoted().into(), history.quoted().into()],
        ))
        .await
        .map_err(|source| Error::Query { what: WHAT, source })?
        .ok_or(Error::BadRow {
            what: WHAT,
            source: sea_orm::DbErr::RecordNotFound("no row".to_owned()),
        })?;
    if !get::<bool>(&row, "leases", WHAT)? {
        return Err(Error::NoLeaseTable {
            table: table.to_string(),
        });
    }
    let has_history = get::<bool>(&row, "history", WHAT)?;
    let now = get(&row, "now", WHAT)?;
    let database = get(&row, "database", WHAT)?;
    let rows = db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            sql(table, has_history.then_some(&history)),
        ))
        .await
        .map_err(|source| Error::Query { what: WHAT, source })?;
    let leases = rows
        .iter()
        .map(|row| lease_from_row(row, has_history))
        .collect::<Result<_>>()?;
    Ok(Status {
        database,
        table: table.to_string(),
        history_table: has_history.then(|| history.to_string()),
        now,
        leases,
    })
}

/// The lease query, joined with each lease's last run when there is a history.
///
/// A cluster job's runs carry the lease's name as their job; a node job's lease is
/// `job:node`, and the job name may itself hold `:`. So every prefix of the name
/// ending before a `:` is a candidate job (matched with its node), and each candidate
/// is one probe of the `(job, started DESC)` index.
fn sql(table: &TableName, history: Option<&HistoryTable>) -> String {
    let leases = table.quoted();
    // An infinite expiry (set by hand) cannot be subtracted from; it is refused when
    // read back (`read_time`), not here, where the error could not name the lease.
    let base = "l.name, l.holder, l.tick, l.token, l.taken_at, l.expires_at, l.released_at, \
                CASE WHEN isfinite(l.expires_at) \
                     THEN (extract(epoch FROM l.expires_at - now()) * 1000)::bigint \
                END AS expires_in_ms";
    let Some(history) = history else {
        return format!("SELECT {base} FROM {leases} l ORDER BY l.name");
    };
    let runs = history.quoted();
    format!(
        "SELECT {base}, lr.node AS run_node, lr.tick AS run_tick, lr.started AS run_started, \
                lr.finished AS run_finished, lr.outcome AS run_outcome, lr.error AS run_error, \
                lr.lease_lost AS run_lease_lost \
         FROM {leases} l \
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

fn get<T: sea_orm::TryGetable>(row: &QueryResult, col: &str, what: &'static str) -> Result<T> {
    row.try_get::<T>("", col)
        .map_err(|source| Error::BadRow { what, source })
}

fn lease_from_row(row: &QueryResult, has_history: bool) -> Result<LeaseStatus> {
    const WHAT: &str = "read the lease table";
    let lease: String = get(row, "name", WHAT)?;
    let tick = read_time(row, "tick", &lease, "tick")?;
    let taken_at = read_time(row, "taken_at", &lease, "taken_at")?;
    let expires_at = read_time(row, "expires_at", &lease, "expires_at")?;
    let released_at: Option<DateTime<Utc>> = read_time(row, "released_at", &lease, "released_at")?;
    let expires_in_ms: i64 = get(row, "expires_in_ms", WHAT)?;
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
                node: get(row, "run_node", WHAT)?,
                tick: read_time(row, "run_tick", &lease, "the tick of its last run")?,
                started,
                finished: read_time(row, "run_finished", &lease, "the finished of its last run")?,
                outcome: get(row, "run_outcome", WHAT)?,
                error: get(row, "run_error", WHAT)?,
                lease_lost: get(row, "run_lease_lost", WHAT)?,
            }),
        },
    };
    Ok(LeaseStatus {
        lease,
        holder: get(row, "holder", WHAT)?,
        tick,
        token: get(row, "token", WHAT)?,
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
/// A value beyond chrono's range set by hand would panic in sqlx's decoding, so
/// [`scheduler_postgres::timestamp_out_of_range`] is asked first.
fn read_time<T: sea_orm::TryGetable>(
    row: &QueryResult,
    col: &str,
    lease: &str,
    label: &str,
) -> Result<T> {
    use scheduler_postgres::OutOfRange;
    const WHAT: &str = "read the lease table";
    if let Some(beyond) = scheduler_postgres::timestamp_out_of_range(row, col) {
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
            what: WHAT,
            source: sea_orm::DbErr::Custom(format!("lease {lease:?}: {label} holds {value}")),
        });
    }
    get(row, col, WHAT)
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

impl LeaseStatus {
    /// "EXPIRES IN" as shown: `in 12s`, `expired 3s ago`, `released`.
    pub fn expires_in(&self) -> String {
        match self.state {
            LeaseState::Released => "released".to_owned(),
            LeaseState::Held => format!("in {}", duration(self.expires_in_ms)),
            LeaseState::Expired => format!("expired {} ago", duration(self.expires_in_ms)),
        }
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
                        r.outcome.clone()
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
                l.expires_in(),
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
