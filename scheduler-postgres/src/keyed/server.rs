//! What a [`Keyed`](super::Keyed) handle reads from the server once: the lock table's
//! size and the settings the store's own transactions run with.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

use super::LockTable;
use crate::error::Error;
use crate::store::PostgresStore;

/// What a handle reads from the server once.
#[derive(Debug, Clone)]
pub(super) struct Server {
    pub(super) lock_table: LockTable,
    pub(super) settings: Settings,
}

/// The settings a transaction the store opens runs with, in the server's own text
/// form (`10s`), for `set_config`.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    /// `idle_in_transaction_session_timeout`: the store's idle guard.
    pub(super) idle: String,
    /// `statement_timeout`: on a pool the store opened, the server's default rather
    /// than the connections' lease bound.
    pub(super) statement: String,
}

/// Reads the lock table's settings, and the [`Settings`] the store's transactions run
/// with: in such a transaction ([`PostgresStore::begin`]), rolled back after.
pub(super) async fn read_server(store: &PostgresStore) -> Result<Server, Error> {
    const OP: &str = "read the lock table and transaction settings";
    let txn = store
        .begin()
        .await
        .map_err(|source| Error::statement(OP, source))?;
    let row = txn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_setting('max_locks_per_transaction')::int4 AS max_locks_per_transaction, \
                    current_setting('max_connections')::int4 AS max_connections, \
                    current_setting('max_prepared_transactions')::int4 AS max_prepared_transactions, \
                    current_setting('idle_in_transaction_session_timeout') AS idle, \
                    current_setting('statement_timeout') AS statement",
        ))
        .await
        .map_err(|source| Error::statement(OP, source))?;
    txn.rollback()
        .await
        .map_err(|source| Error::statement(OP, source))?;
    let row = row.ok_or_else(|| Error::BadRow {
        operation: OP,
        cause: DbErr::Custom("no row returned".to_owned()),
    })?;
    let bad_row = |source| Error::BadRow {
        operation: OP,
        cause: source,
    };
    let get = |column: &str| -> Result<u32, Error> {
        let value: i32 = row.try_get("", column).map_err(bad_row)?;
        u32::try_from(value).map_err(|e| bad_row(DbErr::Custom(format!("{column} = {value}: {e}"))))
    };
    Ok(Server {
        lock_table: LockTable {
            max_locks_per_transaction: get("max_locks_per_transaction")?,
            max_connections: get("max_connections")?,
            max_prepared_transactions: get("max_prepared_transactions")?,
        },
        settings: Settings {
            idle: row.try_get("", "idle").map_err(bad_row)?,
            statement: row.try_get("", "statement").map_err(bad_row)?,
        },
    })
}
