//! PostgreSQL: the lease table, the bookkeeping table, the run history and the
//! migrations' lock.
//!
//! Every statement is built for a [`TableName`] (or the [`HistoryTable`] derived
//! from one), whose parts are validated identifiers: nothing else is ever spliced.

use crate::{HistoryTable, TableName};

/// Takes one of the migrations' locks: a transaction-level advisory lock on the hash
/// of a key ([`lock_key`], [`schema_lock_key`]), bound as `$1`.
///
/// Whatever creates schema objects for a lease table (its migrations, its run
/// history) takes the lease table's lock first in its transaction, so instances
/// starting together create each object once; whatever creates the lease table's
/// schema takes the schema's lock too. The lock vanishes at commit or rollback: it
/// never outlives the transaction and nothing leaks into the pool.
///
/// Whoever decides what to create from what exists must look *after* the lock is
/// granted, in a snapshot taken then: under `READ COMMITTED`, in a later statement.
/// This statement takes its own snapshot before it waits, and under `REPEATABLE READ`
/// or `SERIALIZABLE` that first snapshot is the transaction's, so it would never see
/// what the previous holder committed.
pub const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// The key [`LOCK`] takes for the lease table `table`: one per lease table, so two
/// apps sharing a database with different tables do not wait for each other.
pub fn lock_key(table: &TableName) -> String {
    format!("scheduler-migrations:{table}")
}

/// The key [`LOCK`] takes before creating the schema of a qualified lease table
/// (`None` for an unqualified one): one per schema, so the migrations of two lease
/// tables in one new schema create it one after the other.
///
/// Taken after [`lock_key`]'s lock, never before, and only to create the schema.
/// It cannot be a table's key: a table name holds no `:`.
pub fn schema_lock_key(table: &TableName) -> Option<String> {
    let schema = table.schema()?;
    Some(format!("scheduler-migrations:schema:{schema}"))
}

/// Creates the schema of a qualified lease table (`None` for an unqualified one,
/// which lives in the first existing schema of the `search_path`).
///
/// `IF NOT EXISTS` does not make it safe to run twice at once: of two transactions
/// creating the schema, the second waits for the first and then fails on the unique
/// index of `pg_namespace` (SQLSTATE 23505). Run it under [`schema_lock_key`]'s lock,
/// after checking there that the schema is still missing: `CREATE SCHEMA IF NOT
/// EXISTS` needs CREATE on the database even when the schema exists, so running it
/// only when the schema is missing lets a user with CREATE on an existing schema
/// alone migrate.
pub fn create_schema(table: &TableName) -> Option<String> {
    let schema = table.schema()?;
    Some(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
}

/// Creates the bookkeeping table of `table` (`<table>_migrations`), which records
/// the name of every migration applied, when it is missing.
pub fn create_bookkeeping(table: &TableName) -> String {
    let book = table.migrations_table();
    format!(
        "CREATE TABLE IF NOT EXISTS {book} (
                version    text        PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )"
    )
}

/// Creates the lease table.
///
/// One row per lease name, kept forever (release expires the row in place rather than
/// deleting it, so the last tick stays recorded and the fencing token keeps growing).
/// `fillfactor = 50` leaves room in each page so renewals and releases stay HOT
/// updates and leave almost no dead index entries behind.
pub(crate) fn create_leases(table: &TableName) -> Vec<String> {
    let t = table.quoted();
    let constraint = format!("\"{}_token_positive\"", table.table());
    vec![format!(
        "CREATE TABLE {t} (
                name        text        PRIMARY KEY,
                holder      text        NOT NULL,
                tick        timestamptz NOT NULL,
                token       bigint      NOT NULL,
                taken_at    timestamptz NOT NULL DEFAULT now(),
                expires_at  timestamptz NOT NULL,
                released_at timestamptz,
                CONSTRAINT {constraint} CHECK (token > 0)
            ) WITH (fillfactor = 50)"
    )]
}

/// Adds `cancel_tick`: a newer tick of the job asks the holder of an older one to
/// stop (overlap policy "cancel running"); the holder's renewal reads it.
///
/// ```sql
/// ALTER TABLE scheduler_leases ADD COLUMN cancel_tick timestamptz
/// ```
pub(crate) fn add_cancel_tick(table: &TableName) -> Vec<String> {
    let t = table.quoted();
    vec![format!(
        "ALTER TABLE {t} ADD COLUMN cancel_tick timestamptz"
    )]
}

/// The operators' controls (pause, resume, trigger now, dynamic schedules) and
/// their record, next to the lease table `t` (each suffix keeps the name within
/// PostgreSQL's 63 characters, as `_migrations` does):
///
/// - `t_controls`: one row per paused (or once paused) job, per node or for every
///   node (`node = ''`); the batched take refuses a job whose row says `paused`;
/// - `t_audit`: every control applied — who (`actor`), when, why;
/// - `t_triggers`: runs asked for now, `pending` → `running` → `done`; a claim keeps
///   the job's lease row's `released_at` from before it (`prev_released_at`), which
///   the finish puts back, so a triggered run never changes the tick's completion;
/// - `t_schedules`: dynamic schedules, bound by `handler` to code the app registered;
///   a removed one stays as a tombstone (`removed`) so polling instances drop it;
/// - `t_handlers`: the handlers each node registered (what a schedule is checked
///   against when it is stored);
/// - `t_version`: one row, the control version every change bumps, which instances
///   poll.
///
/// Each statement leaves what exists alone (`IF NOT EXISTS`, `ON CONFLICT DO
/// NOTHING`): a lease table dropped by hand is repaired by deleting the bookkeeping
/// rows and migrating again, and these tables survive the lease table's drop.
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
                job        text        NOT NULL,
                node       text        NOT NULL DEFAULT '',
                paused     boolean     NOT NULL,
                since      timestamptz NOT NULL,
                actor      text        NOT NULL,
                why        text        NOT NULL,
                resumed_at timestamptz,
                catch_up   boolean,
                version    bigint      NOT NULL,
                PRIMARY KEY (job, node)
            )"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {audit} (
                id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                at     timestamptz NOT NULL,
                job    text        NOT NULL,
                node   text,
                action text        NOT NULL,
                actor  text        NOT NULL,
                why    text        NOT NULL,
                detail text        NOT NULL DEFAULT ''
            )"
        ),
        format!("CREATE INDEX IF NOT EXISTS {audit_job} ON {audit} (job, id)"),
        format!(
            "CREATE TABLE IF NOT EXISTS {triggers} (
                id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                job          text        NOT NULL,
                node         text,
                requested_at timestamptz NOT NULL,
                actor        text        NOT NULL,
                why          text        NOT NULL,
                state        text        NOT NULL CHECK (state IN ('pending', 'running', 'done')),
                holder       text,
                lease        text,
                started_at   timestamptz,
                finished_at  timestamptz,
                outcome      text,
                error        text,
                prev_released_at timestamptz
            )"
        ),
        format!("CREATE INDEX IF NOT EXISTS {open} ON {triggers} (id) WHERE state <> 'done'"),
        format!(
            "CREATE TABLE IF NOT EXISTS {schedules} (
                name       text        PRIMARY KEY,
                handler    text        NOT NULL,
                schedule   text        NOT NULL,
                zone       text,
                scope      text        NOT NULL CHECK (scope IN ('cluster', 'node')),
                policy     text        NOT NULL DEFAULT '',
                args       jsonb       NOT NULL DEFAULT '{{}}',
                enabled    boolean     NOT NULL,
                removed    boolean     NOT NULL DEFAULT false,
                version    bigint      NOT NULL,
                updated_at timestamptz NOT NULL,
                actor      text        NOT NULL
            )"
        ),
        format!("CREATE INDEX IF NOT EXISTS {changed} ON {schedules} (version)"),
        format!(
            "CREATE TABLE IF NOT EXISTS {handlers} (
                handler text        NOT NULL,
                node    text        NOT NULL,
                seen_at timestamptz NOT NULL,
                PRIMARY KEY (handler, node)
            )"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {version} (
                id      integer PRIMARY KEY CHECK (id = 1),
                version bigint  NOT NULL
            )"
        ),
        format!("INSERT INTO {version} (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"),
    ]
}

/// Creates `t_jobs`: the jobs each node runs (registered in code), which an
/// operator's pause, resume or trigger of a job is checked against, like
/// `t_handlers` for a dynamic schedule's handler.
pub(crate) fn create_jobs(table: &TableName) -> Vec<String> {
    let jobs = table.with_suffix("_jobs");
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {jobs} (
            job     text        NOT NULL,
            node    text        NOT NULL,
            seen_at timestamptz NOT NULL,
            PRIMARY KEY (job, node)
        )"
    )]
}

/// Creates `t_instances`: one row per instance that beats (its node's), live while
/// not `stopped` and `expires_at` is ahead (both on the database's clock).
pub(crate) fn create_instances(table: &TableName) -> Vec<String> {
    let instances = table.with_suffix("_instances");
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {instances} (
            node       text        NOT NULL PRIMARY KEY,
            version    text        NOT NULL,
            started_at timestamptz NOT NULL,
            seen_at    timestamptz NOT NULL,
            expires_at timestamptz NOT NULL,
            stopped    boolean     NOT NULL
        )"
    )]
}

/// Indexes the dynamic schedules for the dashboard's lists: by handler (its
/// filter), and, when the `pg_trgm` extension is there or can be created (it is a
/// trusted extension: the database's owner, or a role with `CREATE` on it, may),
/// by trigrams of the folded name, so a search by part of a name reads the matches,
/// not every schedule. Without `pg_trgm` the migration still applies (a notice says
/// why) and the search reads every schedule, as before.
pub(crate) fn index_schedules(table: &TableName) -> Vec<String> {
    let schedules = table.with_suffix("_schedules");
    let by_handler = table.index_name("_schedules", "_handler");
    let search = table.index_name("_schedules", "_search");
    vec![
        format!(
            "CREATE INDEX IF NOT EXISTS {by_handler} ON {schedules} (handler, name) \
             WHERE NOT removed"
        ),
        format!(
            "DO $search$
            DECLARE
                trgm_schema name;
            BEGIN
                BEGIN
                    CREATE EXTENSION IF NOT EXISTS pg_trgm;
                EXCEPTION WHEN OTHERS THEN
                    RAISE NOTICE 'pg_trgm could not be created (%): the search of the \
                        schedules by name reads every schedule', SQLERRM;
                END;
                SELECT n.nspname INTO trgm_schema FROM pg_extension e
                    JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
                IF trgm_schema IS NOT NULL THEN
                    EXECUTE format('CREATE INDEX IF NOT EXISTS {search} ON {schedules} \
                        USING gin (lower(name COLLATE \"C\") %I.gin_trgm_ops) WHERE NOT removed',
                        trgm_schema);
                END IF;
            END
            $search$"
        ),
    ]
}

/// Gives each dynamic schedule its bound, `next_tick`: no tick of the row before it
/// is still undecided (`scheduler_core::control::due`). Rows stored before it read
/// as the epoch (due); the index serves the read of the rows due by an instant, in
/// `(next_tick, name)` order.
pub(crate) fn add_next_tick(table: &TableName) -> Vec<String> {
    let schedules = table.with_suffix("_schedules");
    let due = table.index_name("_schedules", "_due");
    vec![
        format!(
            "ALTER TABLE {schedules} ADD COLUMN IF NOT EXISTS next_tick timestamptz NOT NULL \
             DEFAULT 'epoch'"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {due} ON {schedules} (next_tick, name) \
             WHERE enabled AND NOT removed"
        ),
    ]
}

/// The history table's newest column: a table without it is brought up to date by
/// running [`create_history`] again.
pub const HISTORY_NEWEST_COLUMN: &str = "attempt";

/// Creates the run history table and its indexes when they are missing.
///
/// The history is not a migration of the lease table: it exists only for apps that
/// ask for it (SQLite's twin is [`crate::sqlite::create_history`]). Whoever creates
/// it takes [`LOCK`] first. It
/// lives next to the lease table, whose migrations created its schema, so there is
/// no `CREATE SCHEMA` here. For the lease table `scheduler_leases`:
///
/// ```sql
/// CREATE TABLE scheduler_leases_runs (
///     id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- replica identity
///     job        text        NOT NULL,  -- the job's name (not the lease's: no `:node`)
///     tick       timestamptz NOT NULL,
///     node       text        NOT NULL,
///     holder     text        NOT NULL,
///     token      bigint      NOT NULL,
///     started    timestamptz NOT NULL,  -- on the database's clock
///     finished   timestamptz NOT NULL,
///     outcome    text        NOT NULL,  -- succeeded | failed | cancelled
///     error      text,                  -- bounded by the recorder
///     lease_lost boolean     NOT NULL,
///     attempt    integer     NOT NULL DEFAULT 1  -- 2 for the first retry, …
/// );
/// CREATE INDEX scheduler_leases_runs_job  ON scheduler_leases_runs (job, started DESC);
/// CREATE INDEX scheduler_leases_runs_time ON scheduler_leases_runs (started);
/// CREATE INDEX scheduler_leases_runs_jobid ON scheduler_leases_runs (job, id);
/// CREATE INDEX scheduler_leases_runs_fail  ON scheduler_leases_runs (id)
///     WHERE outcome IN ('failed', 'cancelled', 'timed_out', 'lease_lost');
/// ```
///
/// followed by an `ALTER TABLE … ADD COLUMN IF NOT EXISTS attempt` for a table
/// created before the column existed ([`HISTORY_NEWEST_COLUMN`] tells whether it is due).
///
/// The first index serves "the last run of each job", the second the retention
/// sweep, the third a job's runs by id and each job's latest run (the failing
/// jobs), the fourth the failed runs by id. A table created before the last two
/// existed gets them when the history is opened again
/// ([`HistoryTable::newest_index`] tells whether it is due); building them takes
/// a lock that holds up the history's writes (not the leases') while it runs. The primary key gives the table a replica identity, so the sweep's deletes
/// still work under logical replication.
pub fn create_history(table: &HistoryTable) -> Vec<String> {
    let t = table.quoted();
    let by_job = table.index("_job");
    let by_time = table.index("_time");
    let by_job_id = table.index("_jobid");
    let failed = table.index("_fail");
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (
            id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            job        text        NOT NULL,
            tick       timestamptz NOT NULL,
            node       text        NOT NULL,
            holder     text        NOT NULL,
            token      bigint      NOT NULL,
            started    timestamptz NOT NULL,
            finished   timestamptz NOT NULL,
            outcome    text        NOT NULL,
            error      text,
            lease_lost boolean     NOT NULL,
            attempt    integer     NOT NULL DEFAULT 1
        )"
        ),
        // A table created before retries existed gets the column (every row of it
        // was a first attempt).
        format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS attempt integer NOT NULL DEFAULT 1"),
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

    fn table(name: &str) -> TableName {
        TableName::new(name).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_lock_key_names_the_lease_table() {
        assert_eq!(
            lock_key(&TableName::default()),
            "scheduler-migrations:scheduler_leases"
        );
        assert_eq!(
            lock_key(&table("app_a.leases")),
            "scheduler-migrations:app_a.leases"
        );
    }

    #[test]
    fn the_schema_lock_key_names_the_schema() {
        assert_eq!(schema_lock_key(&TableName::default()), None);
        let key = schema_lock_key(&table("app_a.leases"));
        assert_eq!(key.as_deref(), Some("scheduler-migrations:schema:app_a"));
        // No table's key is a schema's: that would take a table named `schema:app_a`.
        assert!(TableName::new("schema:app_a").is_err());
    }

    #[test]
    fn only_a_qualified_table_creates_its_schema() {
        assert_eq!(create_schema(&TableName::default()), None);
        assert_eq!(
            create_schema(&table("app_a.leases")).as_deref(),
            Some("CREATE SCHEMA IF NOT EXISTS \"app_a\"")
        );
    }

    #[test]
    fn statements_name_only_the_quoted_tables() {
        let leases = table("app_a.leases");
        let history = HistoryTable::for_leases(&leases);
        assert!(create_bookkeeping(&leases).contains("\"app_a\".\"leases_migrations\" ("));
        let [create] = create_leases(&leases)
            .try_into()
            .unwrap_or_else(|v| panic!("{v:?}"));
        assert!(
            create.starts_with("CREATE TABLE \"app_a\".\"leases\" ("),
            "{create}"
        );
        assert!(create.contains("CONSTRAINT \"leases_token_positive\" CHECK"));
        let [table, attempt, by_job, by_time, by_job_id, failed] = create_history(&history)
            .try_into()
            .unwrap_or_else(|v| panic!("{v:?}"));
        assert!(table.contains("\"app_a\".\"leases_runs\" ("), "{table}");
        assert_eq!(
            attempt,
            "ALTER TABLE \"app_a\".\"leases_runs\" ADD COLUMN IF NOT EXISTS attempt integer NOT NULL DEFAULT 1"
        );
        assert_eq!(
            by_job,
            "CREATE INDEX IF NOT EXISTS \"leases_runs_job\" ON \"app_a\".\"leases_runs\" (job, started DESC)"
        );
        assert_eq!(
            by_time,
            "CREATE INDEX IF NOT EXISTS \"leases_runs_time\" ON \"app_a\".\"leases_runs\" (started)"
        );
        assert_eq!(
            by_job_id,
            "CREATE INDEX IF NOT EXISTS \"leases_runs_jobid\" ON \"app_a\".\"leases_runs\" (job, id)"
        );
        assert_eq!(
            failed,
            "CREATE INDEX IF NOT EXISTS \"leases_runs_fail\" ON \"app_a\".\"leases_runs\" (id) \
             WHERE outcome IN ('failed', 'cancelled', 'timed_out', 'lease_lost')"
        );
        assert_eq!(history.newest_index(), "\"app_a\".\"leases_runs_fail\"");
    }
}
