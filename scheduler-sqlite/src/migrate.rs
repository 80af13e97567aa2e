//! Creates and upgrades the schema in one `BEGIN IMMEDIATE` transaction.
//!
//! `BEGIN IMMEDIATE` takes SQLite's write lock at once (waiting up to the busy
//! timeout), so processes opening one file at once queue on it; each then finds the
//! bookkeeping table up to date and applies nothing. SQLite's DDL is transactional: a
//! failed migration leaves no trace.
//!
//! The statements are `scheduler_migrations`' SQLite ones, recorded under the
//! migrations' shared names in a bookkeeping table named after the lease table
//! (`<table>_migrations`).

use scheduler_migrations::{MIGRATIONS, TableName, sqlite as ddl};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, SqliteTransactionMode, Statement,
    TransactionOptions, TransactionTrait,
};

use crate::error::{Error, Origin, Result};
use crate::sql::NOW;

/// Checks, for a store opened without migrations, that the lease table has the
/// columns this version's statements use (a missing table is left to the
/// statements' own errors): renewals read `cancel_tick`.
pub(crate) async fn check(db: &DatabaseConnection, table: &TableName) -> Result<()> {
    const OP: &str = "check the lease table's columns";
    let columns: Vec<String> = db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            "SELECT name FROM pragma_table_info(?1)",
            [table.table().to_owned().into()],
        ))
        .await
        .map_err(|cause| Error::Statement {
            operation: OP,
            cause,
        })?
        .iter()
        .map(|row| row.try_get::<String>("", "name"))
        .collect::<Result<_, DbErr>>()
        .map_err(|cause| Error::BadRow {
            operation: OP,
            cause,
        })?;
    let Some((migration, names)) = scheduler_migrations::missing_columns(&columns) else {
        return Ok(());
    };
    Err(Error::Migrate {
        migration: migration.to_owned(),
        cause: DbErr::Custom(format!(
            "the lease table {table} lacks column(s) {} that this version needs, and the store was \
             opened with migrate(false); open it once with migrate(true) to upgrade it",
            names.join(", ")
        )),
    })
}

/// Applies every pending migration of the lease table `table`.
pub(crate) async fn run(db: &DatabaseConnection, table: &TableName, origin: &Origin) -> Result<()> {
    let fail = |migration: &'static str| {
        move |source: DbErr| {
            origin.error("create the lease table", source, |source| Error::Migrate {
                migration: migration.to_owned(),
                cause: source,
            })
        }
    };
    let setup = fail("setup");
    let txn = db
        .begin_with_options(TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        })
        .await
        .map_err(&setup)?;
    txn.execute_unprepared(&ddl::create_bookkeeping(table))
        .await
        .map_err(&setup)?;
    let book = table.migrations_table();
    let applied: Vec<String> = txn
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            format!("SELECT version FROM {book}"),
        ))
        .await
        .map_err(&setup)?
        .iter()
        .map(|row| row.try_get::<String>("", "version"))
        .collect::<Result<_, DbErr>>()
        .map_err(&setup)?;
    for migration in MIGRATIONS {
        let name = migration.name();
        if applied.iter().any(|applied| applied == name) {
            continue;
        }
        tracing::info!(migration = name, table = %table, path = %origin.path.display(), "applying migration");
        for sql in migration.sqlite(table) {
            txn.execute_unprepared(&sql).await.map_err(fail(name))?;
        }
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            format!("INSERT INTO {book} (version, applied_at) VALUES (?1, {NOW})"),
            [name.into()],
        ))
        .await
        .map_err(fail(name))?;
    }
    txn.commit().await.map_err(setup)?;
    Ok(())
}
