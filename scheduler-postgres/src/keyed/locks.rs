//! A chunk's advisory locks: the locking statements, and the start of a chunk's
//! transaction, which takes them.

use sea_orm::{DbErr, Value};

use super::server::{Server, Settings};
use super::{Keyed, KeyedOptions, STRIPE_LOCK_CLASS, hash};
use crate::error::sqlstate;
use crate::session::Checkout;
#[cfg(doc)]
use crate::store::PostgresStore;

/// The locking statement of per-key locks when the client computes the lock ids: `$1`
/// the chunk's distinct lock ids, `$2` and `$3` the transaction's settings
/// ([`Settings`]). The locking call is an output expression of the sorting query, not
/// referenced by its `ORDER BY`: PostgreSQL evaluates it after the sort, row by row.
/// (The client sorts the ids too, so the sort finds them in order.)
const LOCK_IDS: &str = "SELECT set_config('idle_in_transaction_session_timeout', $2, true) AS idle, \
        set_config('statement_timeout', $3, true) AS bound, count(*) AS locks FROM ( \
       SELECT pg_advisory_xact_lock(s.id) FROM unnest($1::int8[]) AS s(id) ORDER BY s.id \
     ) AS l";

/// The same when the server computes the lock ids: `$1` the chunk's keys.
const LOCK_KEYS: &str = "SELECT set_config('idle_in_transaction_session_timeout', $2, true) AS idle, \
        set_config('statement_timeout', $3, true) AS bound, count(*) AS locks FROM ( \
       SELECT pg_advisory_xact_lock(s.id) FROM ( \
         SELECT DISTINCT hashtextextended(k, 0) AS id FROM unnest($1::text[]) AS k \
       ) AS s ORDER BY s.id \
     ) AS l";

/// A handle's locking statements: [`LOCK_IDS`] and [`LOCK_KEYS`], or their stripe
/// forms.
#[derive(Debug)]
pub(super) struct LockStatements {
    /// `$1` the sorted distinct lock ids (or stripes), computed by the client.
    ids: String,
    /// `$1` the keys, hashed by the server (`$4` the stripe count, for stripes).
    keys: String,
}

impl LockStatements {
    pub(super) fn new(options: &KeyedOptions) -> Self {
        match options.stripes {
            None => LockStatements {
                ids: LOCK_IDS.to_owned(),
                keys: LOCK_KEYS.to_owned(),
            },
            Some(_) => LockStatements {
                // `$1` the chunk's distinct stripes, sorted (int4 values, bound as
                // int8 so that a stripe count beyond int4 fails as it does below).
                ids: format!(
                    "SELECT set_config('idle_in_transaction_session_timeout', $2, true) AS idle, \
                            set_config('statement_timeout', $3, true) AS bound, count(*) AS locks FROM ( \
                       SELECT pg_advisory_xact_lock({STRIPE_LOCK_CLASS}, s.id::int4) \
                       FROM unnest($1::int8[]) AS s(id) ORDER BY s.id \
                     ) AS l"
                ),
                // `$1` the keys, `$4` the stripe count.
                keys: format!(
                    "SELECT set_config('idle_in_transaction_session_timeout', $2, true) AS idle, \
                            set_config('statement_timeout', $3, true) AS bound, count(*) AS locks FROM ( \
                       SELECT pg_advisory_xact_lock({STRIPE_LOCK_CLASS}, s.id) FROM ( \
                         SELECT DISTINCT ((hashtextextended(k, 0) % $4 + $4) % $4)::int4 AS id \
                         FROM unnest($1::text[]) AS k \
                       ) AS s ORDER BY s.id \
                     ) AS l"
                ),
            },
        }
    }
}

/// Which step of starting a chunk failed.
#[derive(Debug)]
pub(super) enum Start {
    /// `BEGIN`, or the settings after it.
    Begin(DbErr),
    /// The locking statement.
    Lock(DbErr),
}

impl Keyed {
    /// Begins a chunk's transaction and takes its locks; returns how many. Directly on
    /// PostgreSQL that is a bare `BEGIN` and the locking statement, which sets the
    /// transaction's settings; if that statement hits the connection's own
    /// `statement_timeout` (a key held longer than the lease bound), the chunk starts
    /// again as below. Behind a transaction pooler, and after such a timeout, the
    /// transaction begins as [`PostgresStore::begin`]'s do (whose `DEALLOCATE ALL` must
    /// come before the named statements that follow) and then takes the locks. A
    /// failed start is rolled back: the locks taken, if any, vanish with it (or, if the
    /// rollback fails, with the connection, which is then closed).
    pub(super) async fn start<K: AsRef<str>>(
        &self,
        keys: &[K],
        server: &Server,
    ) -> Result<(Checkout, u64), Start> {
        let session = self.store.session();
        let mut conn = session.checkout().await.map_err(Start::Begin)?;
        if !self.store.transaction_pooling() {
            conn.simple("BEGIN").await.map_err(Start::Begin)?;
            match self.lock(&mut conn, keys, server).await {
                Ok(locks) => return Ok((conn, locks)),
                Err(source) => {
                    if sqlstate(&source).as_deref() != Some("57014") {
                        let _ = conn.end("ROLLBACK").await;
                        return Err(Start::Lock(source));
                    }
                    // On the same connection, or on another if the rollback failed
                    // (which closes this one).
                    if conn.simple("ROLLBACK").await.is_err() {
                        // Let go of it first: the pool may have no other.
                        drop(conn);
                        conn = session.checkout().await.map_err(Start::Begin)?;
                    }
                    tracing::debug!(
                        keys = keys.len(),
                        "keyed locks held longer than the connection's statement_timeout; \
                         waiting again in a transaction with the store's settings"
                    );
                }
            }
        }
        conn.simple(&session.begin_sql())
            .await
            .map_err(Start::Begin)?;
        match self.lock(&mut conn, keys, server).await {
            Ok(locks) => Ok((conn, locks)),
            Err(source) => {
                let _ = conn.end("ROLLBACK").await;
                Err(Start::Lock(source))
            }
        }
    }

    /// Sets the transaction settings on `txn` and takes the advisory locks of `keys`, in
    /// sorted order; returns how many. The lock ids are computed here when they are the
    /// server's ([`Server::client_hashes`]), else by the server in the statement.
    async fn lock<K: AsRef<str>>(
        &self,
        conn: &mut Checkout,
        keys: &[K],
        server: &Server,
    ) -> Result<u64, DbErr> {
        let stripes = self.options.stripes.map(|s| i64::from(s.max(1)));
        let Settings {
            idle,
            statement: bound,
        } = &server.settings;
        let (sql, mut values): (&str, Vec<Value>) = if server.client_hashes {
            let ids = keys.iter().map(|k| hash::lock_id(k.as_ref()));
            let mut ids: Vec<i64> = match stripes {
                None => ids.collect(),
                // What the server-hashing statement computes, `(h % n + n) % n` (n > 0).
                Some(n) => ids.map(|id| id.rem_euclid(n)).collect(),
            };
            ids.sort_unstable();
            ids.dedup();
            (&self.lock.ids, vec![ids.into()])
        } else {
            let names: Vec<String> = keys.iter().map(|k| k.as_ref().to_owned()).collect();
            (&self.lock.keys, vec![names.into()])
        };
        values.extend([idle.as_str().into(), bound.as_str().into()]);
        if let (false, Some(n)) = (server.client_hashes, stripes) {
            values.push(n.into());
        }
        let row = conn
            .fetch_one(sql, values)
            .await?
            .ok_or_else(|| DbErr::Custom("the locking statement returned no row".to_owned()))?;
        let locks: i64 = row.try_get("", "locks")?;
        Ok(u64::try_from(locks).unwrap_or(0))
    }
}
