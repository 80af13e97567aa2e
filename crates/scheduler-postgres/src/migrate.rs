//! Runs the migrations under a transaction-level advisory lock.
//!
//! All pending migrations run in **one transaction** that first takes
//! `pg_advisory_xact_lock` on a key derived from the table name. Instances starting
//! at once queue on the lock; each then finds the bookkeeping table up to date and
//! applies nothing. The lock vanishes at commit or rollback, so it never outlives the
//! migration and nothing leaks into the pool (a session lock would, and would not
//! work behind PgBouncer's transaction pooling at all). PostgreSQL's DDL is
//! transactional: a failed migration leaves no trace.

use scheduler_migrations::TableName;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, TransactionTrait};
use sea_orm_migration::SchemaManager;

use crate::error::{Error, Result, sqlstate};

/// Applies every pending migration of the lease table `table`.
pub(crate) async fn run(db: &DatabaseConnection, table: &TableName) -> Result<()> {
    let fail = |migration: &str| {
        let migration = migration.to_owned();
        move |source: DbErr| {
            let hint = match sqlstate(&source).as_deref() {
                Some("42501") => {
                    "; the database user needs CREATE on the schema (or run the migrations once as a user that has it, and open the store with migrate(false))"
                }
                Some("25006") => {
                    "; the server is read-only (a replica?): point the URL at the primary"
                }
                _ => "",
            };
            Error::Migrate {
                migration: migration.clone(),
                source,
                hint,
            }
        }
    };
    let setup = fail("setup");
    let txn = db
        .begin()
        .await
        .map_err(|source| Error::Connect { source })?;
    let lock_key = format!("scheduler-migrations:{table}");
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        [lock_key.into()],
    ))
    .await
    .map_err(&setup)?;
    if let Some(schema) = table.schema() {
        txn.execute_unprepared(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
            .await
            .map_err(&setup)?;
    }
    let book = table.migrations_table();
    txn.execute_unprepared(&format!(
        "CREATE TABLE IF NOT EXISTS {book} (
            version    text        PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )"
    ))
    .await
    .map_err(&setup)?;
    let applied: Vec<String> = txn
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT version FROM {book}"),
        ))
        .await
        .map_err(&setup)?
        .iter()
        .map(|row| row.try_get::<String>("", "version"))
        .collect::<Result<_, DbErr>>()
        .map_err(&setup)?;
    for migration in scheduler_migrations::migrations(table) {
        let name = migration.name().to_owned();
        if applied.contains(&name) {
            continue;
        }
        tracing::info!(migration = %name, table = %table, "applying migration");
        migration
            .up(&SchemaManager::new(&txn))
            .await
            .map_err(fail(&name))?;
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!("INSERT INTO {book} (version) VALUES ($1)"),
            [name.clone().into()],
        ))
        .await
        .map_err(fail(&name))?;
    }
    txn.commit().await.map_err(setup)?;
    Ok(())
}
