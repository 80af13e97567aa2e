//! SQLite: the lease table, the bookkeeping table, the controls and the run history.
//!
//! The same tables as on PostgreSQL, with SQLite's types: every time is an `INTEGER`
//! of microseconds since the Unix epoch, on SQLite's clock (ticks are
//! microsecond-precise and must round-trip exactly), so no column has a default the
//! store would have to trust. `STRICT` makes SQLite refuse a value of the wrong type
//! instead of storing it. SQLite has no schemas and no advisory locks: the store
//! serialises migrations with `BEGIN IMMEDIATE`.

use crate::{HistoryTable, TableName};

/// Creates the bookkeeping table of `table` (`<table>_migrations`), which records
/// the name of every migration applied, when it is missing.
pub fn create_bookkeeping(table: &TableName) -> String {
    let book = table.migrations_table();
    format!(
        "CREATE TABLE IF NOT EXISTS {book} (
            version    TEXT    NOT NULL PRIMARY KEY,
            applied_at INTEGER NOT NULL
        ) STRICT"
    )
}

/// Creates the lease table.
///
/// One row per lease name, kept forever (release expires the row in place rather than
/// deleting it, so the last tick stays recorded and the fencing token keeps growing).
/// `WITHOUT ROWID` keeps the rows in the primary-key b-tree itself, so each lease
/// operation updates one tree.
pub(crate) fn create_leases(table: &TableName) -> Vec<String> {
    let t = table.quoted();
    let constraint = format!("\"{}_token_positive\"", table.table());
    vec![format!(
        "CREATE TABLE {t} (
            name        TEXT    NOT NULL PRIMARY KEY,
            holder      TEXT    NOT NULL,
            tick        INTEGER NOT NULL,
            token       INTEGER NOT NULL,
            taken_at    INTEGER NOT NULL,
            expires_at  INTEGER NOT NULL,
            released_at INTEGER,
            CONSTRAINT {constraint} CHECK (token > 0)
        ) STRICT, WITHOUT ROWID"
    )]
}

/// Adds `cancel_tick` (integer microseconds, as `tick`): see the PostgreSQL
/// migration of the same name.
pub(crate) fn add_cancel_tick(table: &TableName) -> Vec<String> {
    let t = table.quoted();
    vec![format!("ALTER TABLE {t} ADD COLUMN cancel_tick INTEGER")]
}

/// The operators' controls and their record: see the PostgreSQL migration of the
/// same name. Times are integer microseconds; `args` is JSON text (`json_valid`).
/// As there, each statement leaves what exists alone (`IF NOT EXISTS`, `ON CONFLICT
/// DO NOTHING`), so migrating again after the bookkeeping rows were deleted works.
pub(crate) fn create_controls(table: &TableName) -> Vec<String> {
    let controls = table.with_suffix("_controls");
    let audit = table.with_suffix("_audit");
    let triggers = table.with_suffix("_triggers");
    let schedules = table.with_suffix("_schedules");
    let handlers = table.with_suffix("_handlers");
    let version = table.with_suffix("_version");
    let audit_job = table.index_name("_audit", "_job");
    let open = table.index_name("_triggers", "_open");
    let changed = table.index_name("_schedules", "_changed");
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {controls} (
                job        TEXT    NOT NULL,
                node       TEXT    NOT NULL DEFAULT '',
                paused     INTEGER NOT NULL,
                since      INTEGER NOT NULL,
                actor      TEXT    NOT NULL,
                why        TEXT    NOT NULL,
                resumed_at INTEGER,
                catch_up   INTEGER,
                version    INTEGER NOT NULL,
                PRIMARY KEY (job, node)
            ) STRICT, WITHOUT ROWID"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {audit} (
                id     INTEGER PRIMARY KEY AUTOINCREMENT,
                at     INTEGER NOT NULL,
                job    TEXT    NOT NULL,
                node   TEXT,
                action TEXT    NOT NULL,
                actor  TEXT    NOT NULL,
                why    TEXT    NOT NULL,
                detail TEXT    NOT NULL DEFAULT ''
            ) STRICT"
        ),
        format!("CREATE INDEX IF NOT EXISTS {audit_job} ON {audit} (job, id)"),
        format!(
            "CREATE TABLE IF NOT EXISTS {triggers} (
                id           INTEGER PRIMARY KEY AUTOINCREMENT,
                job          TEXT    NOT NULL,
                node         TEXT,
                requested_at INTEGER NOT NULL,
                actor        TEXT    NOT NULL,
                why          TEXT    NOT NULL,
                state        TEXT    NOT NULL CHECK (state IN ('pending', 'running', 'done')),
                holder       TEXT,
                lease        TEXT,
                started_at   INTEGER,
                finished_at  INTEGER,
                outcome      TEXT,
                error        TEXT,
                prev_released_at INTEGER
            ) STRICT"
        ),
        format!("CREATE INDEX IF NOT EXISTS {open} ON {triggers} (id) WHERE state <> 'done'"),
        format!(
            "CREATE TABLE IF NOT EXISTS {schedules} (
                name       TEXT    NOT NULL PRIMARY KEY,
                handler    TEXT    NOT NULL,
                schedule   TEXT    NOT NULL,
                zone       TEXT,
                scope      TEXT    NOT NULL CHECK (scope IN ('cluster', 'node')),
                policy     TEXT    NOT NULL DEFAULT '',
                args       TEXT    NOT NULL DEFAULT '{{}}' CHECK (json_valid(args)),
                enabled    INTEGER NOT NULL,
                removed    INTEGER NOT NULL DEFAULT 0,
                version    INTEGER NOT NULL,
                updated_at INTEGER NOT NULL,
                actor      TEXT    NOT NULL
            ) STRICT, WITHOUT ROWID"
        ),
        format!("CREATE INDEX IF NOT EXISTS {changed} ON {schedules} (version)"),
        format!(
            "CREATE TABLE IF NOT EXISTS {handlers} (
                handler TEXT    NOT NULL,
                node    TEXT    NOT NULL,
                seen_at INTEGER NOT NULL,
                PRIMARY KEY (handler, node)
            ) STRICT, WITHOUT ROWID"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {version} (
                id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
                version INTEGER NOT NULL
            ) STRICT"
        ),
        format!("INSERT INTO {version} (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"),
    ]
}

/// Creates `t_jobs`, as [`crate::postgres`] does, times in integer microseconds.
pub(crate) fn create_jobs(table: &TableName) -> Vec<String> {
    let jobs = table.with_suffix("_jobs");
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {jobs} (
            job     TEXT    NOT NULL,
            node    TEXT    NOT NULL,
            seen_at INTEGER NOT NULL,
            PRIMARY KEY (job, node)
        ) STRICT, WITHOUT ROWID"
    )]
}

/// Creates `t_instances`, as [`crate::postgres`] does, times in integer
/// microseconds, `stopped` 0 or 1.
pub(crate) fn create_instances(table: &TableName) -> Vec<String> {
    let instances = table.with_suffix("_instances");
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {instances} (
            node       TEXT    NOT NULL PRIMARY KEY,
            version    TEXT    NOT NULL,
            started_at INTEGER NOT NULL,
            seen_at    INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            stopped    INTEGER NOT NULL
        ) STRICT, WITHOUT ROWID"
    )]
}

/// Indexes the dynamic schedules by handler, as [`crate::postgres`] does (SQLite
/// has no trigram index: its search by part of a name reads every schedule).
pub(crate) fn index_schedules(table: &TableName) -> Vec<String> {
    let schedules = table.with_suffix("_schedules");
    let by_handler = table.index_name("_schedules", "_handler");
    vec![format!(
        "CREATE INDEX IF NOT EXISTS {by_handler} ON {schedules} (handler, name) \
         WHERE removed = 0"
    )]
}

/// Gives each dynamic schedule its bound, `next_tick` (integer microseconds), as
/// [`crate::postgres`] does: rows stored before it read as the epoch (0: due).
pub(crate) fn add_next_tick(table: &TableName) -> Vec<String> {
    let schedules = table.with_suffix("_schedules");
    let due = table.index_name("_schedules", "_due");
    vec![
        format!("ALTER TABLE {schedules} ADD COLUMN next_tick INTEGER NOT NULL DEFAULT 0"),
        format!(
            "CREATE INDEX IF NOT EXISTS {due} ON {schedules} (next_tick, name) \
             WHERE enabled = 1 AND removed = 0"
        ),
    ]
}

/// Creates the run history table and its indexes when they are missing: the
/// PostgreSQL history ([`postgres::create_history`](crate::postgres::create_history))
/// with SQLite's types — times (`tick`, `started`, `finished`) are integer
/// microseconds since the epoch on SQLite's clock, `lease_lost` is 0 or 1. For the
/// lease table `scheduler_leases`:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS scheduler_leases_runs (
///     id         INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: pages by id
///     job        TEXT    NOT NULL,
///     tick       INTEGER NOT NULL,
///     node       TEXT    NOT NULL,
///     holder     TEXT    NOT NULL,
///     token      INTEGER NOT NULL,
///     started    INTEGER NOT NULL,
///     finished   INTEGER NOT NULL,
///     outcome    TEXT    NOT NULL,
///     error      TEXT,
///     lease_lost INTEGER NOT NULL,
///     attempt    INTEGER NOT NULL DEFAULT 1
/// ) STRICT;
/// CREATE INDEX IF NOT EXISTS scheduler_leases_runs_job  ON scheduler_leases_runs (job, started DESC);
/// CREATE INDEX IF NOT EXISTS scheduler_leases_runs_time ON scheduler_leases_runs (started);
/// CREATE INDEX IF NOT EXISTS scheduler_leases_runs_jobid ON scheduler_leases_runs (job, id);
/// CREATE INDEX IF NOT EXISTS scheduler_leases_runs_fail  ON scheduler_leases_runs (id)
///     WHERE outcome IN ('failed', 'cancelled', 'timed_out', 'lease_lost');
/// ```
///
/// Like the PostgreSQL history it is not a migration of the lease table: it exists
/// only for apps that ask for it. It was born with `attempt`, so it needs no
/// upgrade statement; the indexes added since (`_jobid`, `_fail`) are created when
/// the history is opened again (`IF NOT EXISTS`).
pub fn create_history(table: &HistoryTable) -> Vec<String> {
    let t = table.quoted();
    let by_job = table.index("_job");
    let by_time = table.index("_time");
    let by_job_id = table.index("_jobid");
    let failed = table.index("_fail");
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (
            id         INTEGER PRIMARY KEY AUTOINCREMENT,
            job        TEXT    NOT NULL,
            tick       INTEGER NOT NULL,
            node       TEXT    NOT NULL,
            holder     TEXT    NOT NULL,
            token      INTEGER NOT NULL,
            started    INTEGER NOT NULL,
            finished   INTEGER NOT NULL,
            outcome    TEXT    NOT NULL,
            error      TEXT,
            lease_lost INTEGER NOT NULL,
            attempt    INTEGER NOT NULL DEFAULT 1
        ) STRICT"
        ),
        format!("CREATE INDEX IF NOT EXISTS {by_job} ON {t} (job, started DESC)"),
        format!("CREATE INDEX IF NOT EXISTS {by_time} ON {t} (started)"),
        // A job's runs newest first, and the latest run of each job.
        format!("CREATE INDEX IF NOT EXISTS {by_job_id} ON {t} (job, id)"),
        // The failed runs newest first, however rare they are.
        format!(
            "CREATE INDEX IF NOT EXISTS {failed} ON {t} (id) WHERE {}",
            crate::failed_run()
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_only_the_quoted_tables() {
        let leases = TableName::new("leases").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            create_bookkeeping(&leases)
                .starts_with("CREATE TABLE IF NOT EXISTS \"leases_migrations\" (")
        );
        let [create] = create_leases(&leases)
            .try_into()
            .unwrap_or_else(|v| panic!("{v:?}"));
        assert!(create.starts_with("CREATE TABLE \"leases\" ("), "{create}");
        assert!(create.contains("CONSTRAINT \"leases_token_positive\" CHECK"));
        let history = HistoryTable::for_leases(&leases);
        let [table, by_job, by_time, by_job_id, failed] = create_history(&history)
            .try_into()
            .unwrap_or_else(|v| panic!("{v:?}"));
        assert!(
            table.starts_with("CREATE TABLE IF NOT EXISTS \"leases_runs\" ("),
            "{table}"
        );
        assert_eq!(
            by_job,
            "CREATE INDEX IF NOT EXISTS \"leases_runs_job\" ON \"leases_runs\" (job, started DESC)"
        );
        assert_eq!(
            by_time,
            "CREATE INDEX IF NOT EXISTS \"leases_runs_time\" ON \"leases_runs\" (started)"
        );
        assert_eq!(
            by_job_id,
            "CREATE INDEX IF NOT EXISTS \"leases_runs_jobid\" ON \"leases_runs\" (job, id)"
        );
        assert_eq!(
            failed,
            "CREATE INDEX IF NOT EXISTS \"leases_runs_fail\" ON \"leases_runs\" (id) \
             WHERE outcome IN ('failed', 'cancelled', 'timed_out', 'lease_lost')"
        );
    }
}
