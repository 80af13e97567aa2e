//! Idempotent keyed processing: each key of a batch (an event's client-generated
//! UUID, a domain to check) is processed **exactly once**, in short transactions that
//! take transaction-level advisory locks and pin no connection.
//!
//! One transaction per chunk of keys:
//!
//! 1. `BEGIN`;
//! 2. one statement gives the transaction the settings the store's transactions carry
//!    (`idle_in_transaction_session_timeout`, `statement_timeout`) and takes
//!    `pg_advisory_xact_lock` on every distinct key hash of the chunk, **in ascending
//!    order of the hash**;
//! 3. the caller's work runs on the transaction, for that chunk's keys only: typically
//!    "which of these keys are new?" and then the writes for the new ones
//!    (`INSERT … ON CONFLICT (key) DO NOTHING`, counters, derived rows);
//! 4. `COMMIT`. The locks vanish at commit or rollback, also when the work fails or
//!    panics: nothing outlives the transaction, so nothing leaks into the pool and it
//!    works behind PgBouncer's transaction pooling.
//!
//! Two workers given overlapping batches never both work on one key at once, so a
//! check-then-write of several statements is safe; and since every transaction takes
//! its locks in one global order, they never wait on each other in a cycle (no
//! `deadlock detected` after `deadlock_timeout`, no aborted transaction).
//!
//! A batch is checked and deduplicated before its first `BEGIN`: a key holding a NUL
//! byte (which PostgreSQL `text` cannot hold) refuses the whole batch
//! ([`KeyedError::NulInKey`]), and the work is handed **each distinct key once**, at its
//! first occurrence, in input order (later items with the same key are dropped).
//!
//! # Round trips
//!
//! Besides the work's own statements a chunk costs three round trips: `BEGIN`, the
//! locking statement and `COMMIT`. The locking statement carries the transaction's
//! settings itself (`set_config(…, true)`, which is `SET LOCAL`), with the chunk's lock
//! ids (or its keys, see below) as a bound array, never spliced into SQL text; the
//! settings are those the store's own transactions run with ([`PostgresStore::begin`]),
//! read back once per handle. Between `BEGIN` and that statement the transaction holds
//! no lock and no snapshot.
//!
//! On a pool the store created, directly on PostgreSQL, nothing else either: the chunk's
//! connection is not handed back to the pool when the chunk ends, where sqlx would test
//! it with a round trip of its own, but kept for the next chunk, while fewer than a
//! quarter of the pool's `max_connections` are kept so (see
//! [`PostgresOptions::max_connections`](crate::PostgresOptions::max_connections);
//! beyond that, and on an app's pool or behind a transaction pooler, the connection
//! goes back to the pool and sqlx tests it). The work therefore runs on a
//! [`KeyedTransaction`] of the crate's, which implements sea-orm's `ConnectionTrait`,
//! instead of a sea-orm `DatabaseTransaction`. A connection is closed instead of kept
//! when a statement on it failed in a way that may leave the session unfit (anything
//! but a timeout, a lock or serialization conflict, bad data or a violated
//! constraint), or when the chunk's future was dropped or its work panicked before the
//! transaction ended.
//!
//! That statement itself still runs under the connection's own `statement_timeout`:
//! on a pool the store opened, the lease-statement bound
//! ([`PostgresOptions::statement_timeout`](crate::PostgresOptions::statement_timeout)).
//! When a key is held longer than that, the chunk rolls back and waits again in a
//! transaction that starts as [`PostgresStore::begin`] starts it (settings first, one
//! round trip more), where the wait is bounded only as the store's transactions are
//! (on such a pool, by the server's default). So waits are never cut short by the
//! lease bound; only a wait that long pays a second `BEGIN`. (The retry follows
//! SQLSTATE 57014, which a cancel by `pg_cancel_backend` shares: such a cancel of the
//! first locking statement is followed by one more attempt, whose cancel then ends the
//! batch.) Behind a transaction pooler every chunk starts that way (`DEALLOCATE ALL`
//! and the settings), since the statements after it are prepared under names that must
//! not clash with other clients'.
//!
//! # The hash
//!
//! A key's lock id is `hashtextextended(key, 0)`, PostgreSQL's stable 64-bit text hash
//! (the one hash partitioning relies on, PostgreSQL ≥ 11), so every client, whatever its
//! language, derives the same id from SQL. `hashtext` would do too, but is 32-bit: among
//! 100,000 keys it already makes one colliding pair on average. A collision never breaks
//! exactly-once (two keys sharing a lock only wait for each other), it only adds
//! contention; 64 bits make that negligible. The single-`bigint` advisory lock space is
//! shared with every other user of `pg_advisory_xact_lock(bigint)` in the database.
//!
//! The client computes it: the function hashes the text's bytes in the database's
//! encoding, so in a UTF-8 (or `SQL_ASCII`) database on a little-endian server it is
//! the client's own hash of the key's UTF-8 bytes. Once per handle the server encoding
//! is read and the server's ids of a few keys (every length of the hash's tail) are
//! compared with the client's; if either differs (another encoding, a big-endian
//! server), the handle sends the keys instead and the server hashes them, in the locking
//! statement, for the whole chunk. Either way the locks are the same ids; the test
//! `keyed_lock_ids` reads them from `pg_locks` in a UTF-8 and in a LATIN1 database. The
//! client's ids are sorted and distinct, so the server neither hashes nor deduplicates,
//! and the statement binds 8 bytes per key instead of its text.
//!
//! # Lock order
//!
//! The locks are taken by
//! `SELECT pg_advisory_xact_lock(s.id) FROM unnest($1::int8[]) AS s(id) ORDER BY s.id`
//! (when the server hashes: `… FROM (SELECT DISTINCT hashtextextended(k, 0) AS id FROM
//! unnest($1::text[]) AS k) AS s ORDER BY s.id`). An `ORDER BY` inside a subquery
//! would not be enough (nothing obliges the outer query to keep that order); here the
//! locking call is an output expression of the query that sorts, and PostgreSQL
//! evaluates output expressions that the `ORDER BY` does not reference *after* sorting
//! (documented under "SELECT List" in the `SELECT` reference since 9.6). The client
//! sorts its ids too, but the order does not rest on that. The test
//! `keyed_lock_order` checks it on a real server: blocked on one key, a worker holds
//! exactly the locks of the smaller hashes.
//!
//! # Large batches: chunks or stripes
//!
//! Advisory locks live in the server's **shared** lock table, which has
//! `max_locks_per_transaction × (max_connections + max_prepared_transactions)` slots
//! for all sessions together (not 64 per transaction); a transaction that needs more
//! fails with `out of shared memory` (SQLSTATE 53200). Two ways to stay below it:
//!
//! - **Chunks** (the default): a batch is split, in input order, into transactions of
//!   at most [`KeyedOptions::chunk`] distinct keys, each locking in sorted order and
//!   committing on its own. Exactly-once per key still holds, but the batch is **not
//!   atomic**: when a chunk fails, the chunks before it stay committed
//!   ([`KeyedError::committed`] says how many keys). Lock waits stay per key.
//! - **Stripes** ([`KeyedOptions::stripes`]): keys are folded into a fixed number of
//!   locks (`hash mod stripes`, on the two-`int4` advisory lock space under a class id
//!   of their own, so they never meet single-`bigint` locks). The lock count is bounded,
//!   so the whole batch runs in **one atomic transaction**; but unrelated keys that
//!   share a stripe wait for each other, and with few stripes concurrent batches
//!   mostly serialise. Every process working on a key space must use the same stripe
//!   count (and all stripes or all per-key locks), or they do not exclude each other.
//!
//! The default chunk is derived from the server's settings, read once per [`Keyed`]
//! handle: a sixteenth of the lock table (so that about sixteen concurrent chunks, plus
//! everyone's ordinary locks, fit), at most [`MAX_DEFAULT_CHUNK`] keys. With
//! PostgreSQL's defaults (`max_locks_per_transaction = 64`, `max_connections = 100`) it
//! is 400 keys.

mod batch;
mod error;
mod hash;
mod locks;
mod options;
mod server;
mod transaction;

use std::sync::Arc;

use tokio::sync::OnceCell;

use self::batch::{Batch, NulAt};
pub use self::error::KeyedError;
use self::locks::{LockStatements, Start};
pub use self::options::{KeyedOptions, LockTable, MAX_DEFAULT_CHUNK, STRIPE_LOCK_CLASS};
use self::server::{Server, read_server};
pub use self::transaction::KeyedTransaction;
use crate::error::{Error, sqlstate};
use crate::fenced::FencedFuture;
use crate::store::PostgresStore;

/// What a processed batch ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processed<T> {
    /// What the work returned, one value per transaction, in input order.
    pub values: Vec<T>,
    /// Advisory locks taken, summed over the transactions (distinct key hashes, or
    /// distinct stripes, per transaction).
    pub locks: u64,
}

impl<T> Processed<T> {
    /// How many transactions ran (chunks of the batch); 0 for an empty batch.
    pub fn transactions(&self) -> usize {
        self.values.len()
    }
}

/// Processes batches of keyed items exactly once per key. Made by
/// [`PostgresStore::keyed`]; cheap to clone, and clones share the cached server
/// settings.
#[derive(Debug, Clone)]
pub struct Keyed {
    store: PostgresStore,
    options: KeyedOptions,
    /// The locking statements for these options.
    lock: Arc<LockStatements>,
    server: Arc<OnceCell<Server>>,
}

impl PostgresStore {
    /// A handle that processes keyed batches on this store's pool; see the
    /// [module docs](crate::keyed).
    pub fn keyed(&self, options: KeyedOptions) -> Keyed {
        Keyed {
            store: self.clone(),
            lock: Arc::new(LockStatements::new(&options)),
            options,
            server: Arc::new(OnceCell::new()),
        }
    }
}

impl Keyed {
    /// The options the handle was made with.
    pub fn options(&self) -> &KeyedOptions {
        &self.options
    }

    /// The server's lock table settings, read on first use and cached.
    ///
    /// # Errors
    /// [`Error::Statement`] if the settings cannot be read, [`Error::BadRow`] if they
    /// do not parse.
    pub async fn lock_table(&self) -> Result<LockTable, Error> {
        Ok(self.server().await?.lock_table)
    }

    /// At most how many keys one transaction handles: [`KeyedOptions::chunk`], else
    /// [`LockTable::default_chunk`].
    ///
    /// # Errors
    /// As [`lock_table`](Self::lock_table).
    pub async fn chunk(&self) -> Result<usize, Error> {
        match self.options.chunk {
            Some(chunk) => Ok(chunk.max(1)),
            None => Ok(self.lock_table().await?.default_chunk()),
        }
    }

    async fn server(&self) -> Result<&Server, Error> {
        self.server
            .get_or_try_init(|| read_server(&self.store))
            .await
    }

    /// Processes `keys` exactly once per key: for each chunk of the batch, in input
    /// order, one transaction takes the chunk's advisory locks in sorted hash order,
    /// runs `work(txn, chunk)` and commits. `work` writes only its chunk's items;
    /// giving `keys` as the items themselves (`K: AsRef<str>` returning the key) hands
    /// it the items directly. An empty batch runs nothing.
    ///
    /// `work` is handed **each distinct key once**, at its first occurrence, in input
    /// order: a later item with the same key is dropped before any transaction (so a
    /// set-based insert of the chunk never books a key twice). `K: Clone` is only used
    /// when the batch holds such repeats, to hand `work` a slice without them.
    ///
    /// Each transaction borrows one connection for its duration only: keep `work`
    /// short (a few statements), since other workers wait for its keys. On a pool the
    /// store created, directly on PostgreSQL, that connection is kept out of the pool
    /// between chunks when there is room (see the [module docs](crate::keyed)), so that
    /// a chunk does not pay sqlx's test of a connection handed back to its pool (a round
    /// trip); `work` runs on a [`KeyedTransaction`] for that reason, not on a sea-orm
    /// `DatabaseTransaction` (no nested transactions or streams: a savepoint is a raw
    /// `SAVEPOINT`).
    ///
    /// The lock order makes the *advisory* locks deadlock-free, and since no two
    /// transactions hold a key at once, writes to rows keyed by the chunk's keys never
    /// wait on each other either, in whatever order `work` makes them (a batched
    /// `INSERT … ON CONFLICT` without the locks must sort its rows, or concurrent
    /// batches sharing ids deadlock). Rows that several keys share (a balance, a
    /// counter) are another matter: lock or update them in a fixed order.
    ///
    /// ```no_run
    /// use scheduler_postgres::{KeyedOptions, PostgresStore};
    /// use sea_orm::{ConnectionTrait, DbBackend, Statement};
    ///
    /// # async fn ingest(store: &PostgresStore, ids: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    /// let keyed = store.keyed(KeyedOptions::default());
    /// let done = keyed
    ///     .process(ids, |txn, chunk| {
    ///         let ids: Vec<String> = chunk.to_vec();
    ///         Box::pin(async move {
    ///             txn.execute_raw(Statement::from_sql_and_values(
    ///                 DbBackend::Postgres,
    ///                 "INSERT INTO events (id) SELECT unnest($1::text[]) ON CONFLICT (id) DO NOTHING",
    ///                 [ids.into()],
    ///             ))
    ///             .await
    ///             .map(|r| r.rows_affected())
    ///         })
    ///     })
    ///     .await?;
    /// println!("{} new events in {} transactions", done.values.iter().sum::<u64>(), done.transactions());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`KeyedError::NulInKey`] if a key holds a NUL byte (nothing runs),
    /// [`KeyedError::Work`] if `work` fails, [`KeyedError::Aborted`] if it returns `Ok`
    /// after its last statement failed (its transaction is then aborted, and a
    /// `COMMIT` would roll it back), [`KeyedError::OutOfLockSlots`] if the
    /// server's lock table has no room for a chunk's locks, [`KeyedError::Store`] if the
    /// database fails otherwise. The failing chunk is rolled back; earlier chunks stay
    /// committed ([`KeyedError::committed`]). If a `COMMIT` itself fails, that chunk's
    /// outcome is unknown, as with any commit; processing the batch again is safe.
    ///
    /// # Panics
    /// Only if `work` panics; the panic propagates. The transaction is then dropped
    /// and its connection closed (never handed back to a pool inside a transaction):
    /// the server rolls the chunk back, and releases its locks, as it sees the
    /// connection go (at once between statements; a statement still running, such as
    /// a lock wait, runs to its end first, bounded by the transaction's
    /// `statement_timeout`).
    ///
    /// # Cancel safety
    /// Dropping the future rolls back the running chunk (as for a panic) and keeps the
    /// chunks committed before.
    pub async fn process<K, T, E, F>(
        &self,
        keys: &[K],
        mut work: F,
    ) -> Result<Processed<T>, KeyedError<E>>
    where
        K: AsRef<str> + Clone + Sync,
        F: for<'c> FnMut(&'c KeyedTransaction, &'c [K]) -> FencedFuture<'c, T, E> + Send,
        T: Send,
        E: Send,
    {
        let batch = Batch::new(keys).map_err(|NulAt(index)| KeyedError::NulInKey { index })?;
        let keys = batch.keys();
        let mut processed = Processed {
            values: Vec::new(),
            locks: 0,
        };
        if keys.is_empty() {
            return Ok(processed);
        }
        let store = |committed| {
            move |source| KeyedError::Store {
                cause: source,
                committed,
            }
        };
        let server = self.server().await.map_err(store(0))?;
        let lock_table = server.lock_table;
        let chunk = self
            .options
            .chunk
            .unwrap_or(lock_table.default_chunk())
            .max(1);
        let per_transaction = match self.options.stripes {
            Some(stripes) if usize::try_from(stripes).is_ok_and(|s| s <= chunk) => keys.len(),
            _ => chunk,
        };
        if per_transaction < keys.len() {
            tracing::debug!(
                keys = keys.len(),
                per_transaction,
                "keyed batch split into several transactions"
            );
        }
        let mut done = 0;
        for part in keys.chunks(per_transaction) {
            let committed = batch.done_through(done);
            let statement = |source| Error::statement("process keyed items", source);
            let (txn, locks) = match self.start(part, server).await {
                Ok(started) => started,
                Err(Start::Begin(source)) => return Err(store(committed)(statement(source))),
                Err(Start::Lock(source)) => {
                    return Err(match sqlstate(&source).as_deref() {
                        Some("53200") => KeyedError::OutOfLockSlots {
                            chunk: part.len(),
                            max_locks_per_transaction: lock_table.max_locks_per_transaction,
                            slots: lock_table.slots(),
                            committed,
                            cause: source,
                        },
                        _ => {
                            store(committed)(Error::statement("take keyed advisory locks", source))
                        }
                    });
                }
            };
            let txn = KeyedTransaction::new(txn);
            let outcome = work(&txn, part).await;
            let txn = txn.into_inner();
            let aborted = txn.aborted().cloned();
            match (outcome, aborted) {
                // A `COMMIT` would roll back: say so instead of counting it committed.
                (Ok(_), Some(cause)) => {
                    let _ = txn.end("ROLLBACK").await;
                    return Err(KeyedError::Aborted { cause, committed });
                }
                (Ok(value), None) => {
                    txn.end("COMMIT")
                        .await
                        .map_err(|e| store(committed)(statement(e)))?;
                    done += part.len();
                    processed.values.push(value);
                    processed.locks += locks;
                }
                (Err(error), _) => {
                    // Closed instead of kept if the rollback fails.
                    let _ = txn.end("ROLLBACK").await;
                    return Err(KeyedError::Work { error, committed });
                }
            }
        }
        Ok(processed)
    }
}
