//! Runs the migrations under a transaction-level advisory lock.
//!
//! The statements (schema, bookkeeping table, lease table) and the lock are
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
//! A database that is fully migrated needs no `CREATE` right: what exists is looked
//! up first (`to_regclass`), and only what is missing is created. Opening the store
//! then needs `SELECT` on the bookkeeping table (or `migrate(false)`). A read-only
//! server (a hot standby) is refused up front, even when nothing is pending: the store
//! could open there but never take a lease.

use scheduler_migrations::{MIGRATIONS, TableName, postgres as ddl};
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, Statement, Value};

use crate::error::{Error, Result, sqlstate};
use crate::store::PostgresStore;

/// Applies every pending migration of the store's lease table.
pub(crate) async fn run(store: &PostgresStore) -> Result<()> {
    let table: &TableName = store.table();
    let txn = store
        .begin()
        .await
        .map_err(|source| Error::Connect { source })?;
    let setup = |source: DbErr| Error::Migrate {
        hint: generic_hint(&source).to_owned(),
        migration: "setup".to_owned(),
        source,
    };
    let server = Server::read(&txn, table).await.map_err(setup)?;
    server.check_writable()?;
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        ddl::LOCK,
        [ddl::lock_key(table).into()],
    ))
    .await
    .map_err(setup)?;
    let found = Found::read(&txn, table)
        .await
        .map_err(|source| server.fail("setup", source, Server::usage_hint))?;
    // Without a bookkeeping table every migration is pending: a missing right to
    // create it is the first migration's.
    let first = MIGRATIONS.first().map_or("setup", |m| m.name());
    if let Some(create_schema) = ddl::create_schema(table)
        && !found.schema
    {
        txn.execute_unprepared(&create_schema)
            .await
            .map_err(|source| server.fail(first, source, Server::create_hint))?;
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
            source: DbErr::Custom(format!(
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
    for migration in MIGRATIONS {
        let name = migration.name();
        if applied.iter().any(|applied| applied == name) {
            continue;
        }
        tracing::info!(migration = %name, table = %table, "applying migration");
        for sql in migration.postgres(table) {
            txn.execute_unprepared(&sql)
                .await
                .map_err(|source| server.fail(name, source, Server::create_hint))?;
        }
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
                "the server is read-only: it is a hot standby (pg_is_in_recovery() is true)",
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
            source: DbErr::Custom(why.to_owned()),
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
            source,
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
    schema: bool,
    book: bool,
    table: bool,
}

impl Found {
    async fn read(txn: &DatabaseTransaction, table: &TableName) -> Result<Self, DbErr> {
        let schema: Value = table.schema().map(|s| format!("\"{s}\"")).into();
        let row = txn
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT to_regnamespace($1) IS NOT NULL AS schema, \
                        to_regclass($2) IS NOT NULL AS book, to_regclass($3) IS NOT NULL AS leases",
                [
                    schema,
                    table.migrations_table().into(),
                    table.quoted().into(),
                ],
            ))
            .await?
            .ok_or_else(|| DbErr::Custom("the server returned no row".to_owned()))?;
        Ok(Self {
            schema: row.try_get("", "schema")?,
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
