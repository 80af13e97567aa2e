//! Creates and upgrades the schema in one `BEGIN IMMEDIATE` transaction.
//!
//! `BEGIN IMMEDIATE` takes SQLite's write lock at once (waiting up to the busy
//! timeout), so processes opening one file at once queue on it; each then finds the
//! bookkeeping table up to date and applies nothing. SQLite's DDL is transactional: a
//! failed migration leaves no trace.
//!
//! The migrations of `scheduler-migrations` are PostgreSQL DDL. These are their
//! SQLite twins, recorded under the same names in a bookkeeping table named after the
//! lease table (`<table>_migrations`), so a migration added there gets its twin here
//! (a unit test checks that the two lists agree).

use scheduler_migrations::TableName;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, SqliteTransactionMode, Statement,
    TransactionOptions, TransactionTrait,
};

use crate::error::{Error, Origin, Result};
use crate::store::NOW;

/// One step of the schema.
struct Migration {
    /// The name, shared with the PostgreSQL migration of the same step.
    name: &'static str,
    /// Its statements, for a lease table.
    up: fn(&TableName) -> Vec<String>,
}

/// The migrations, oldest first.
const MIGRATIONS: &[Migration] = &[Migration {
    name: "m20261130_000001_create_leases",
    up: create_leases,
}];

/// Creates the lease table.
///
/// One row per lease name, kept forever (release expires the row in place rather than
/// deleting it, so the last tick stays recorded and the fencing token keeps growing).
/// Every time is an `INTEGER` of microseconds since the Unix epoch, on SQLite's clock
/// (ticks are microsecond-precise and must round-trip exactly). `STRICT` makes SQLite
/// refuse a value of the wrong type instead of storing it; `WITHOUT ROWID` keeps the
/// rows in the primary-key b-tree itself, so each lease operation updates one tree.
fn create_leases(table: &TableName) -> Vec<String> {
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

/// Applies every pending migration of the lease table `table`.
pub(crate) async fn run(db: &DatabaseConnection, table: &TableName, origin: &Origin) -> Result<()> {
    let fail = |migration: &'static str| {
        move |source: DbErr| {
            origin.error("create the lease table", source, |source| Error::Migrate {
                migration: migration.to_owned(),
                source,
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
    let book = table.migrations_table();
    txn.execute_unprepared(&format!(
        "CREATE TABLE IF NOT EXISTS {book} (
            version    TEXT    NOT NULL PRIMARY KEY,
            applied_at INTEGER NOT NULL
        ) STRICT"
    ))
    .await
    .map_err(&setup)?;
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
        if applied.iter().any(|name| name == migration.name) {
            continue;
        }
        tracing::info!(migration = migration.name, table = %table, path = %origin.path.display(), "applying migration");
        for sql in (migration.up)(table) {
            txn.execute_unprepared(&sql)
                .await
                .map_err(fail(migration.name))?;
        }
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            format!("INSERT INTO {book} (version, applied_at) VALUES (?1, {NOW})"),
            [migration.name.into()],
        ))
        .await
        .map_err(fail(migration.name))?;
    }
    txn.commit().await.map_err(setup)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_postgres_migration_has_a_sqlite_twin_in_the_same_order() {
        let table = TableName::default();
        let postgres: Vec<String> = scheduler_migrations::migrations(&table)
            .iter()
            .map(|m| m.name().to_owned())
            .collect();
        let sqlite: Vec<&str> = MIGRATIONS.iter().map(|m| m.name).collect();
        assert_eq!(sqlite, postgres);
    }
}
