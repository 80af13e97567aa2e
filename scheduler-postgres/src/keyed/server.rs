//! What a [`Keyed`](super::Keyed) handle reads from the server once: the lock table's
//! size, the settings the store's own transactions run with, and whether the client
//! computes lock ids as the server does.

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

use super::LockTable;
use super::hash::lock_id;
use crate::error::Error;
use crate::store::PostgresStore;

/// Keys whose lock ids the client and the server both compute, to decide whether the
/// client may compute them for the locking statement: every tail length of the hash
/// (0 to 11 bytes past a multiple of 12) and several blocks. ASCII only, which every
/// server encoding holds; whether non-ASCII text has the client's bytes on the server
/// is the server encoding's to say ([`CLIENT_BYTES`]).
const PROBE_KEYS: &[&str] = &[
    "",
    "k",
    "ke",
    "key",
    "key-",
    "key-0",
    "key-01",
    "key-012",
    "key-0123",
    "key-01234",
    "key-012345",
    "key-0123456",
    "key-01234567",
    "key-012345678",
    "6f1c2a9e-4b7d-4e2a-9c3f-1a2b3c4d5e6f",
];

/// The server encodings in which a key's text has the bytes the client hashes (UTF-8;
/// `SQL_ASCII` stores the client's bytes as they come).
const CLIENT_BYTES: &[&str] = &["UTF8", "SQL_ASCII"];

/// What a handle reads from the server once.
#[derive(Debug, Clone)]
pub(super) struct Server {
    pub(super) lock_table: LockTable,
    pub(super) settings: Settings,
    /// Whether [`lock_id`] gives the server's `hashtextextended(key, 0)`: a UTF-8 or
    /// `SQL_ASCII` database, and the server's ids of every probe key are the client's
    /// (not so on a big-endian server, or under a nondeterministic default collation).
    /// Then the client computes the chunk's lock ids; otherwise the server does.
    pub(super) client_hashes: bool,
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

/// Reads the lock table's settings, the [`Settings`] the store's transactions run with,
/// the server encoding and the server's lock ids of [`PROBE_KEYS`]: in such a transaction
/// ([`PostgresStore::begin`]), rolled back after.
pub(super) async fn read_server(store: &PostgresStore) -> Result<Server, Error> {
    const OP: &str = "read the lock table and transaction settings";
    let txn = store
        .begin()
        .await
        .map_err(|source| Error::statement(OP, source))?;
    let probes: Vec<String> = PROBE_KEYS.iter().map(|&k| k.to_owned()).collect();
    let row = txn
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT current_setting('max_locks_per_transaction')::int4 AS max_locks_per_transaction, \
                    current_setting('max_connections')::int4 AS max_connections, \
                    current_setting('max_prepared_transactions')::int4 AS max_prepared_transactions, \
                    current_setting('idle_in_transaction_session_timeout') AS idle, \
                    current_setting('statement_timeout') AS statement, \
                    current_setting('server_encoding') AS encoding, \
                    ARRAY(SELECT hashtextextended(p.k, 0) \
                          FROM unnest($1::text[]) WITH ORDINALITY AS p(k, i) ORDER BY p.i) AS probes",
            [probes.into()],
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
    let encoding: String = row.try_get("", "encoding").map_err(bad_row)?;
    let probes: Vec<i64> = row.try_get("", "probes").map_err(bad_row)?;
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
        client_hashes: CLIENT_BYTES.contains(&encoding.as_str()) && same_lock_ids(&probes),
    })
}

/// Whether `server` holds the client's lock id of each of [`PROBE_KEYS`], in order.
fn same_lock_ids(server: &[i64]) -> bool {
    server.len() == PROBE_KEYS.len()
        && PROBE_KEYS
            .iter()
            .zip(server)
            .all(|(k, &id)| lock_id(k) == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_keys_cover_every_tail_length_in_ascii() {
        let mut tails: Vec<usize> = PROBE_KEYS.iter().map(|k| k.len() % 12).collect();
        tails.sort_unstable();
        tails.dedup();
        assert_eq!(tails, (0..12).collect::<Vec<_>>());
        assert!(PROBE_KEYS.iter().any(|k| k.len() > 24));
        assert!(PROBE_KEYS.iter().all(|k| k.is_ascii()));
    }

    #[test]
    fn lock_ids_differing_anywhere_are_not_the_same() {
        let client: Vec<i64> = PROBE_KEYS.iter().map(|k| lock_id(k)).collect();
        assert!(same_lock_ids(&client));
        for i in 0..client.len() {
            let mut server = client.clone();
            server[i] = server[i].wrapping_add(1);
            assert!(!same_lock_ids(&server));
        }
        assert!(!same_lock_ids(&client[1..]));
    }
}
