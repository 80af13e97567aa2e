//! Runs the migrations under a transaction-level advisory lock.
//!
//! The statements (schema, bookkeeping table, lease table) and the locks are
//! `scheduler_migrations`'; this runner decides what is pending, applies it and says
//! which right is missing when the server refuses.
//!
//! All pending migrations run in **one transaction** that first takes
//! `pg_advisory_xact_lock` on a key derived from the table name. Instances starting
//! at once queue on the lock; each then finds the bookkeeping table up to date and
//! applies nothing. The lock vanishes at commit or rollback, so it never outlives the
//! migration and nothing leaks into the pool (a session lock would, and would not
//! work behind PgBouncer's transaction pooling at all). PostgreSQL's DDL is
//! transactional: a failed migration leaves no trace.
//!
//! What exists is read **after** the lock is granted, in a snapshot taken then, so a
//! migrator that waited sees everything the previous holder committed. The
//! transaction is `READ COMMITTED` whatever the database's or role's default: under
//! `REPEATABLE READ` or `SERIALIZABLE` its snapshot would be taken by its first
//! statement, and the statement that takes the lock takes its snapshot before it
//! waits, so even a transaction that took the lock first would read the state as it
//! was before the previous holder committed, and apply its migrations again. Taking
//! the lock in a transaction of its own would not help either (a transaction-level
//! lock ends with its transaction; a session lock is what this crate avoids). What
//! exists is read from the catalogs as tables (`pg_class`, `pg_namespace`) in the
//! statement's snapshot, not with `to_regclass`: that answers from the server
//! process's catalog cache, which is brought up to date when a transaction starts or
//! locks a relation, not after it waited for an advisory lock, so a connection that
//! had looked the tables up before they existed could still find them missing.
//!
//! A qualified lease table's schema, when missing, is created under a second lock,
//! the schema's, taken after the table's and checked again once held: two lease
//! tables in one new schema have different table locks, and two `CREATE SCHEMA IF
//! NOT EXISTS` at once fail (SQLSTATE 23505).
//!
//! A database that is fully migrated needs no `CREATE` right: what exists is looked
//! up first, and only what is missing is created. Opening the store then needs
//! `SELECT` on the bookkeeping table (or `migrate(false)`). A read-only server (a hot
//! standby) is refused up front, even when nothing is pending: the store could open
//! there but never take a lease.

use scheduler_migrations::{MIGRATIONS, TableName, postgres as ddl};
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, Statement};

use crate::error::{Error, Result, sqlstate};
use crate::session::Session;

/// Why a hot standby is refused (see [`in_recovery`]).
const STANDBY: &str = "the server is read-only: it is a hot standby (pg_is_in_recovery() is true)";

/// Whether `err` refused a server for being a hot standby: one that may be being
/// promoted this very moment (a failover), so opening is worth retrying for a while.
pub(crate) fn in_recovery(err: &Error) -> bool {
    matches!(err, Error::Migrate { migration, cause: DbErr::Custom(why), .. }
        if migration == "setup" && why == STANDBY)
}

/// Checks, for a store opened without migrations, that the lease table has the
/// columns, and the tables beside it, that this version's statements use (renewals
/// read `cancel_tick`, every take reads `<table>_controls`) — from the catalogs,
/// which any user may read (the bookkeeping table may not be readable by an app user
/// with only the lease table's grants). A missing lease table is left to the
/// statements' own errors.
pub(crate) async fn check(session: &Session, table: &TableName) -> Result<()> {
    const OP: &str = "check the lease table's columns and tables";
    // The lease table's columns, and the tables of its schema named after it.
    let rows = match session
        .query(
            OP,
            "SELECT ARRAY(SELECT attname::text FROM pg_catalog.pg_attribute \
                          WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped) \
                      AS columns, \
                    ARRAY(SELECT relname::text FROM pg_catalog.pg_class \
                          WHERE relnamespace = (SELECT relnamespace FROM pg_catalog.pg_class \
                                                WHERE oid = to_regclass($1)) \
                            AND starts_with(relname::text, $2) \
                            AND relkind IN ('r', 'p')) \
                      AS tables, \
                    ARRAY(SELECT attname::text FROM pg_catalog.pg_attribute \
                          WHERE attrelid = to_regclass($3) AND attnum > 0 AND NOT attisdropped) \
                      AS schedule_columns",
            vec![
                table.quoted().into(),
                table.table().to_owned().into(),
                table.with_suffix("_schedules").into(),
            ],
        )
        .await
    {
        Ok(rows) => rows,
        // A schema the user may not look into: the statements will say so, with the
        // grant they need.
        Err(Error::Statement { cause, .. }) if sqlstate(&cause).as_deref() == Some("42501") => {
            return Ok(());
        }
        Err(err) => return Err(err),
    };
    let read = |col: &str| -> Result<Vec<String>> {
        rows.first()
            .map_or(Ok(Vec::new()), |row| row.try_get::<Vec<String>>("", col))
            .map_err(|cause| Error::BadRow {
                operation: OP,
                cause,
            })
    };
    let (columns, tables) = (read("columns")?, read("tables")?);
    let schedule_columns = read("schedule_columns")?;
    if let Some((migration, names)) = scheduler_migrations::missing_columns(&columns) {
        return Err(not_migrated(
            table,
            migration,
            &format!("lacks column(s) {}", names.join(", ")),
        ));
    }
    if let Some((migration, names)) = scheduler_migrations::missing_tables(table, &tables) {
        return Err(not_migrated(
            table,
            migration,
            &format!("has no table(s) {} beside it", names.join(", ")),
        ));
    }
    if let Some((migration, names)) =
        scheduler_migrations::missing_schedule_columns(&schedule_columns)
    {
        return Err(not_migrated(
            table,
            migration,
            &format!(
                "has a schedules table lacking column(s) {}",
                names.join(", ")
            ),
        ));
    }
    Ok(())
}

/// The error of a store opened with `migrate(false)` on a lease table `table` that
/// `lacks` something `migration` adds.
fn not_migrated(table: &TableName, migration: &str, lacks: &str) -> Error {
    Error::Migrate {
        migration: migration.to_owned(),
        cause: DbErr::Custom(format!(
            "the lease table {table} {lacks} that this version needs, and the store was \
             opened with migrate(false)"
        )),
        hint: "; run the migrations once (a store opened with migrate(true), as a database user \
               that may alter the lease table), then start again"
            .to_owned(),
    }
}

/// Applies every pending migration of the store's lease table; creates the schema of
/// a qualified one only when `create_schema` says so (a typo in it would otherwise
/// start a second, silent cluster).
pub(crate) async fn run(session: &Session, table: &TableName, create_schema: bool) -> Result<()> {
    let txn = begin(session).await?;
    let server = Server::read(&txn, table).await.map_err(setup)?;
    server.check_writable()?;
    lock(&txn, ddl::lock_key(table)).await.map_err(setup)?;
    let found = Found::read(&txn, table).await.map_err(setup)?;
    if !found.usable {
        return Err(Error::Migrate {
            migration: "setup".to_owned(),
            cause: DbErr::Custom(format!(
                "permission denied for schema {}: the user may not look up the tables in it",
                table.schema().unwrap_or_default()
            )),
            hint: server.usage_hint("setup"),
        });
    }
    // Without a bookkeeping table every migration is pending: a missing right to
    // create it is the first migration's.
    let first = MIGRATIONS.first().map_or("setup", |m| m.name());
    if !found.schema {
        if !create_schema {
            return Err(Error::MissingSchema {
                schema: table.schema().unwrap_or_default().to_owned(),
                table: table.to_string(),
            });
        }
        self::create_schema(&txn, table, &server, first).await?;
    }
    if !found.book {
        txn.execute_unprepared(&ddl::create_bookkeeping(table))
            .await
            .map_err(|source| server.fail(first, source, Server::create_hint))?;
    }
    let book = table.migrations_table();
    let applied: Vec<String> = txn
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT version FROM {book}"),
        ))
        .await
        .and_then(|rows| {
            rows.iter()
                .map(|row| row.try_get::<String>("", "version"))
                .collect::<Result<_, DbErr>>()
        })
        .map_err(|source| server.fail("setup", source, Server::select_hint))?;
    if !applied.is_empty() && !found.table {
        return Err(Error::Migrate {
            migration: "setup".to_owned(),
            cause: DbErr::Custom(format!(
                "the bookkeeping table {} records {} as applied, but the lease table {table} does not exist",
                server.book,
                applied.join(", ")
            )),
            hint: format!(
                "; was it dropped by hand? delete the rows of {} (DELETE FROM {}) to have the migrations create it again",
                server.book, server.book
            ),
        });
    }
    // Once a migration is applied, the later ones that repeat run again: the earlier
    // one may have created again a table they altered.
    let mut earlier_applied = false;
    for migration in MIGRATIONS {
        let name = migration.name();
        let recorded = applied.iter().any(|applied| applied == name);
        if recorded && !(earlier_applied && migration.repeats_on_postgres()) {
            continue;
        }
        tracing::info!(migration = %name, table = %table, again = recorded, "applying migration");
        for sql in migration.postgres(table) {
            txn.execute_unprepared(&sql)
                .await
                .map_err(|source| server.fail(name, source, Server::create_hint))?;
        }
        if recorded {
            continue;
        }
        earlier_applied = true;
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("INSERT INTO {book} (version) VALUES ($1)"),
            [name.into()],
        ))
        .await
        .map_err(|source| server.fail(name, source, Server::insert_hint))?;
    }
    txn.commit().await.map_err(setup)?;
    Ok(())
}

/// Begins the migration transaction at `READ COMMITTED`, whatever the database's
/// default: each statement after the lock sees what was committed before it was
/// granted. The level is the transaction's first statement, before anything (behind
/// a pooler, `DEALLOCATE ALL`) could take a snapshot.
async fn begin(session: &Session) -> Result<DatabaseTransaction> {
    session.begin_read_committed().await.map_err(Error::connect)
}

/// [`Error::Migrate`] for a step before any migration.
fn setup(source: DbErr) -> Error {
    Error::Migrate {
        hint: generic_hint(&source).to_owned(),
        migration: "setup".to_owned(),
        cause: source,
    }
}

/// Takes [`ddl::LOCK`] on `key`, waiting for its holder's transaction to end.
async fn lock(txn: &DatabaseTransaction, key: String) -> Result<(), DbErr> {
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        ddl::LOCK,
        [key.into()],
    ))
    .await
    .map(drop)
}

/// Creates the schema of a qualified lease table, found missing, under the schema's
/// lock; nothing for an unqualified one.
///
/// Each lease table has its own lock, so the migrations of two tables in one new
/// schema would both find it missing. Whoever gets the schema's lock second finds it
/// created (read in a snapshot taken once the lock is held) and leaves it; creating it
/// again would fail, `IF NOT EXISTS` or not, and would need CREATE on the database.
/// A missing right is `migration`'s.
async fn create_schema(
    txn: &DatabaseTransaction,
    table: &TableName,
    server: &Server,
    migration: &str,
) -> Result<()> {
    let (Some(schema), Some(key), Some(create)) = (
        table.schema(),
        ddl::schema_lock_key(table),
        ddl::create_schema(table),
    ) else {
        return Ok(());
    };
    lock(txn, key).await.map_err(setup)?;
    let exists = txn
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = $1::name) AS found",
            [schema.into()],
        ))
        .await
        .and_then(|row| row.ok_or_else(|| DbErr::Custom("the server returned no row".to_owned())))
        .and_then(|row| row.try_get::<bool>("", "found"))
        .map_err(setup)?;
    if !exists {
        txn.execute_unprepared(&create)
            .await
            .map_err(|source| server.fail(migration, source, Server::create_hint))?;
    }
    Ok(())
}

/// The hint for an error whose SQLSTATE alone says what to do.
fn generic_hint(source: &DbErr) -> &'static str {
    match sqlstate(source).as_deref() {
        Some("25006") => crate::hints::READ_ONLY,
        Some("3F000") => {
            "; no schema of the search_path exists to create the table in: set the search_path, or qualify the table name (PostgresOptions::table(\"schema.table\"))"
        }
        _ => "",
    }
}

/// Who the migrations run as, and where: the names the hints use.
#[derive(Debug)]
struct Server {
    user: String,
    database: String,
    /// The schema the lease table lives in: its own, or the first existing schema of
    /// the search_path.
    schema: Option<String>,
    /// Whether the table name names its schema.
    qualified: bool,
    /// The bookkeeping table, as a `GRANT` would name it.
    book: String,
    standby: bool,
    read_only: bool,
}

impl Server {
    async fn read(txn: &DatabaseTransaction, table: &TableName) -> Result<Self, DbErr> {
        let row = txn
            .query_one_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT current_user::text AS who, current_database()::text AS db, \
                        current_schema()::text AS creates_in, pg_is_in_recovery() AS standby, \
                        current_setting('transaction_read_only') = 'on' AS read_only",
            ))
            .await?
            .ok_or_else(|| DbErr::Custom("the server returned no row".to_owned()))?;
        let schema = match table.schema() {
            Some(schema) => Some(schema.to_owned()),
            None => row.try_get::<Option<String>>("", "creates_in")?,
        };
        Ok(Self {
            user: row.try_get("", "who")?,
            database: row.try_get("", "db")?,
            schema,
            qualified: table.schema().is_some(),
            book: format!("{table}_migrations"),
            standby: row.try_get("", "standby")?,
            read_only: row.try_get("", "read_only")?,
        })
    }

    /// Refuses a read-only server: the store could not write a lease there.
    fn check_writable(&self) -> Result<()> {
        let (why, hint) = if self.standby {
            (
                STANDBY,
                "; point the URL at the primary: the store writes a lease row for every tick",
            )
        } else if self.read_only {
            (
                "the server is read-only: transactions are read-only by default (default_transaction_read_only is on)",
                "; point the URL at the primary, or turn default_transaction_read_only off for this database and user",
            )
        } else {
            return Ok(());
        };
        Err(Error::Migrate {
            migration: "setup".to_owned(),
            cause: DbErr::Custom(why.to_owned()),
            hint: hint.to_owned(),
        })
    }

    /// The error for `source` in `migration`: the right it lacks (from `right` on
    /// SQLSTATE 42501), or what its SQLSTATE says.
    fn fail(&self, migration: &str, source: DbErr, right: fn(&Self, &str) -> String) -> Error {
        let hint = match sqlstate(&source).as_deref() {
            Some("42501") => right(self, migration),
            _ => generic_hint(&source).to_owned(),
        };
        Error::Migrate {
            migration: migration.to_owned(),
            cause: source,
            hint,
        }
    }

    fn create_hint(&self, migration: &str) -> String {
        let (user, database) = (ident(&self.user), ident(&self.database));
        let instead = "or run the migrations once as a user that has it and open the store with migrate(false)";
        let Some(schema) = self.schema.as_deref().map(ident) else {
            return format!(
                "; migration {migration} needs a schema to create the lease table in, and none of the search_path exists: set the search_path, or qualify the table name"
            );
        };
        if self.qualified {
            // A missing schema is created first (which needs CREATE on the database; its
            // creator then owns it), an existing one only needs CREATE on it. Which of
            // the two failed is not known here, so the hint names both.
            format!(
                "; migration {migration} needs CREATE on schema {schema} (GRANT CREATE ON SCHEMA {schema} TO {user}) \
                 or, while schema {schema} does not exist, CREATE on database {database} to create it \
                 (GRANT CREATE ON DATABASE {database} TO {user}); {instead}"
            )
        } else {
            format!(
                "; migration {migration} needs CREATE on schema {schema}: GRANT CREATE ON SCHEMA {schema} TO {user}; {instead}"
            )
        }
    }

    fn select_hint(&self, _: &str) -> String {
        let (user, book) = (ident(&self.user), &self.book);
        format!(
            "; finding the pending migrations needs SELECT on {book}: GRANT SELECT ON {book} TO {user}; or open the store with migrate(false)"
        )
    }

    fn insert_hint(&self, migration: &str) -> String {
        let (user, book) = (ident(&self.user), &self.book);
        format!(
            "; recording migration {migration} needs INSERT on {book}: GRANT INSERT ON {book} TO {user}"
        )
    }

    fn usage_hint(&self, _: &str) -> String {
        match self.schema.as_deref().map(ident) {
            Some(schema) if self.qualified => {
                let user = ident(&self.user);
                format!(
                    "; the user needs USAGE on schema {schema}: GRANT USAGE ON SCHEMA {schema} TO {user}"
                )
            }
            _ => String::new(),
        }
    }
}

/// What of the schema exists already.
#[derive(Debug)]
struct Found {
    /// The schema of a qualified lease table; always true for an unqualified one (its
    /// schema is the search_path's).
    schema: bool,
    /// Whether the user may look up tables in the schema of a qualified lease table
    /// (USAGE on it), when it exists; always true for an unqualified one.
    usable: bool,
    book: bool,
    table: bool,
}

impl Found {
    /// Reads what exists in the statement's snapshot, from the catalogs as tables,
    /// not from the server process's catalog cache (see the module docs). An
    /// unqualified name is looked for in the schemas of the search_path, as
    /// `to_regclass` would.
    async fn read(txn: &DatabaseTransaction, table: &TableName) -> Result<Self, DbErr> {
        let book = format!("{}_migrations", table.table());
        let row = txn
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "WITH search AS (\
                     SELECT oid FROM pg_catalog.pg_namespace \
                     WHERE nspname = ANY (CASE WHEN $1::text IS NULL \
                         THEN pg_catalog.current_schemas(true) ELSE ARRAY[$1::name] END)\
                 ) \
                 SELECT $1::text IS NULL OR EXISTS (SELECT FROM search) AS schema, \
                        coalesce((SELECT pg_catalog.has_schema_privilege(oid, 'USAGE') \
                                  FROM search WHERE $1::text IS NOT NULL), true) AS usable, \
                        EXISTS (SELECT FROM pg_catalog.pg_class \
                                WHERE relname = $2::name AND relnamespace IN (SELECT oid FROM search)) AS book, \
                        EXISTS (SELECT FROM pg_catalog.pg_class \
                                WHERE relname = $3::name AND relnamespace IN (SELECT oid FROM search)) AS leases",
                [
                    table.schema().map(str::to_owned).into(),
                    book.into(),
                    table.table().into(),
                ],
            ))
            .await?
            .ok_or_else(|| DbErr::Custom("the server returned no row".to_owned()))?;
        Ok(Self {
            schema: row.try_get("", "schema")?,
            usable: row.try_get("", "usable")?,
            book: row.try_get("", "book")?,
            table: row.try_get("", "leases")?,
        })
    }
}

/// `name` as SQL would spell it in a hint: bare when it is a plain lowercase
/// identifier, quoted otherwise.
fn ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}
