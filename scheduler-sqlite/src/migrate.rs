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
    TransactionOptions, TransactionTrait, Value,
};

use crate::error::{Error, Origin, Result};
use crate::sql::NOW;

/// Checks, for a store opened without migrations, that the lease table has the
/// columns and the tables beside it that this version's statements use (a missing
/// lease table is left to the statements' own errors): renewals read `cancel_tick`,
/// every take reads `<table>_controls`.
pub(crate) async fn check(db: &DatabaseConnection, table: &TableName) -> Result<()> {
    let columns = names(
        db,
        "check the lease table's columns",
        "SELECT name FROM pragma_table_info(?1)",
        vec![table.table().to_owned().into()],
    )
    .await?;
    if let Some((migration, names)) = scheduler_migrations::missing_columns(&columns) {
        return Err(not_migrated(
            table,
            migration,
            "column(s)",
            &names.join(", "),
        ));
    }
    let tables = names(
        db,
        "check the tables beside the lease table",
        "SELECT name FROM sqlite_master WHERE type = 'table'",
        Vec::new(),
    )
    .await?;
    if let Some((migration, names)) = scheduler_migrations::missing_tables(table, &tables) {
        return Err(not_migrated(
            table,
            migration,
            "the table(s)",
            &names.join(", "),
        ));
    }
    let schedule_columns = names(
        db,
        "check the schedules table's columns",
        "SELECT name FROM pragma_table_info(?1)",
        vec![format!("{}_schedules", table.table()).into()],
    )
    .await?;
    if let Some((migration, names)) =
        scheduler_migrations::missing_schedule_columns(&schedule_columns)
    {
        return Err(not_migrated(
            table,
            migration,
            "in its schedules table the column(s)",
            &names.join(", "),
        ));
    }
    Ok(())
}

/// The `name` column of every row `sql` returns.
async fn names(
    db: &DatabaseConnection,
    operation: &'static str,
    sql: &str,
    values: Vec<Value>,
) -> Result<Vec<String>> {
    db.query_all_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        sql,
        values,
    ))
    .await
    .map_err(|cause| Error::Statement { operation, cause })?
    .iter()
    .map(|row| row.try_get::<String>("", "name"))
    .collect::<Result<_, DbErr>>()
    .map_err(|cause| Error::BadRow { operation, cause })
}

fn not_migrated(table: &TableName, migration: &str, what: &str, names: &str) -> Error {
    Error::Migrate {
        migration: migration.to_owned(),
        cause: DbErr::Custom(format!(
            "the lease table {table} lacks {what} {names} that this version needs, and the store was \
             opened with migrate(false); open it once with migrate(true) to upgrade it"
        )),
    }
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
