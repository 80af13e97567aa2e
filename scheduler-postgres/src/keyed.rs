//! Idempotent keyed processing: each key of a batch (an event's client-generated
//! UUID, a domain to check) is processed **exactly once**, in short transactions that
//! take transaction-level advisory locks and pin no connection.
//!
//! One transaction per chunk of keys:
//!
//! 1. `BEGIN`;
//! 2. one statement takes `pg_advisory_xact_lock` on every distinct key hash of the
//!    chunk, **in ascending order of the hash**;
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
//! # The hash
//!
//! A key's lock id is `hashtextextended(key, 0)`, PostgreSQL's stable 64-bit text hash
//! (the one hash partitioning relies on, PostgreSQL ≥ 11), computed by the server for
//! the whole chunk in the locking statement itself, so every client, whatever its
//! language, derives the same id. `hashtext` would do too, but is 32-bit: among 100,000
//! keys it already makes one colliding pair on average. A collision never breaks
//! exactly-once (two keys sharing a lock only wait for each other), it only adds
//! contention; 64 bits make that negligible. The single-`bigint` advisory lock space is
//! shared with every other user of `pg_advisory_xact_lock(bigint)` in the database.
//!
//! # Lock order
//!
//! The statement is
//! `SELECT pg_advisory_xact_lock(s.id) FROM (SELECT DISTINCT hashtextextended(k, 0) AS id
//! FROM unnest($1::text[]) AS k) AS s ORDER BY s.id`. An `ORDER BY` inside a subquery
//! would not be enough (nothing obliges the outer query to keep that order); here the
//! locking call is an output expression of the query that sorts, and PostgreSQL
//! evaluates output expressions that the `ORDER BY` does not reference *after* sorting
//! (documented under "SELECT List" in the `SELECT` reference since 9.6). The test
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
//!   at most [`KeyedOptions::chunk`] keys, each locking in sorted order and committing
//!   on its own. Exactly-once per key still holds, but the batch is **not atomic**: when
//!   a chunk fails, the chunks before it stay committed ([`KeyedError::committed`] says
//!   how many keys). Lock waits stay per key.
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

use std::sync::Arc;

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, Statement};
use tokio::sync::OnceCell;

use crate::error::{Error, sqlstate};
use crate::fenced::FencedFuture;
use crate::store::PostgresStore;

/// The largest default chunk, in keys. Bigger transactions add latency (every key of
/// the chunk waits for the slowest lock and the commit) without adding throughput.
pub const MAX_DEFAULT_CHUNK: usize = 1_000;

/// The default chunk takes at most this fraction (1/N) of the server's lock table.
const LOCK_TABLE_SHARE: u64 = 16;

/// The advisory lock class id (first `int4` of the two-key form) of lock stripes:
/// `"keyd"` in ASCII.
pub const STRIPE_LOCK_CLASS: i32 = 0x6b65_7964;

/// How a [`Keyed`] handle splits batches and locks keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyedOptions {
    /// At most this many keys per transaction. `None` (the default) derives it from
    /// the server's lock table; see [`LockTable::default_chunk`].
    pub chunk: Option<usize>,
    /// Fold keys into this many lock stripes instead of one lock per key. `None` (the
    /// default): one lock per distinct key.
    pub stripes: Option<u32>,
}

impl KeyedOptions {
    /// At most `keys` keys per transaction (at least 1). Forcing it above what the
    /// server's lock table holds makes large batches fail with
    /// [`KeyedError::OutOfLockSlots`].
    pub fn chunk(mut self, keys: usize) -> Self {
        self.chunk = Some(keys.max(1));
        self
    }

    /// Folds keys into `stripes` locks (at least 1). When `stripes` is no larger than
    /// the chunk bound, a whole batch runs in one transaction.
    pub fn stripes(mut self, stripes: u32) -> Self {
        self.stripes = Some(stripes.max(1));
        self
    }
}

/// The server settings that size the shared lock table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockTable {
    /// `max_locks_per_transaction`: the average number of locks per session the lock
    /// table is sized for.
    pub max_locks_per_transaction: u32,
    /// `max_connections`.
    pub max_connections: u32,
    /// `max_prepared_transactions`.
    pub max_prepared_transactions: u32,
}

impl LockTable {
    /// The lock table's nominal size, shared by all sessions:
    /// `max_locks_per_transaction × (max_connections + max_prepared_transactions)`.
    /// (The server adds room for its own processes and some slack, so a little more
    /// fits in practice.)
    pub fn slots(&self) -> u64 {
        u64::from(self.max_locks_per_transaction)
            * (u64::from(self.max_connections) + u64::from(self.max_prepared_transactions))
    }

    /// The default chunk: a sixteenth of [`slots`](Self::slots), between 1 and
    /// [`MAX_DEFAULT_CHUNK`] keys.
    pub fn default_chunk(&self) -> usize {
        let share = self.slots() / LOCK_TABLE_SHARE;
        usize::try_from(share)
            .unwrap_or(MAX_DEFAULT_CHUNK)
            .clamp(1, MAX_DEFAULT_CHUNK)
    }
}

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

/// Why a keyed batch did not complete. The failing chunk was rolled back; the chunks
/// before it stay committed: `keys[..committed()]` are done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyedError<E> {
    /// The server's shared lock table had no room left for one transaction's advisory
    /// locks (SQLSTATE 53200, `out of shared memory`). Nothing of that transaction was
    /// written.
    #[error(
        "out of lock slots taking the advisory locks of a chunk of {chunk} keys in one transaction: \
         the server's lock table is sized for {slots} locks of all sessions together; raise the \
         server setting max_locks_per_transaction (now {max_locks_per_transaction}), or lower the \
         chunk (KeyedOptions::chunk) or fold keys into lock stripes (KeyedOptions::stripes) \
         (the first {committed} keys of the batch were committed before)"
    )]
    OutOfLockSlots {
        /// How many keys the transaction tried to lock.
        chunk: usize,
        /// The server's `max_locks_per_transaction`.
        max_locks_per_transaction: u32,
        /// The lock table's nominal size, [`LockTable::slots`].
        slots: u64,
        /// How many keys, from the start of the batch, were committed before.
        committed: usize,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// The database failed.
    #[error("{source} (the first {committed} keys of the batch were committed before)")]
    Store {
        /// The store's error.
        #[source]
        source: Error,
        /// How many keys, from the start of the batch, were committed before.
        committed: usize,
    },
    /// The caller's work failed.
    #[error(
        "the keyed work failed: {error} (the first {committed} keys of the batch were committed before)"
    )]
    Work {
        /// The work's error.
        error: E,
        /// How many keys, from the start of the batch, were committed before.
        committed: usize,
    },
}

impl<E> KeyedError<E> {
    /// How many keys, from the start of the batch, were committed before the failure.
    pub fn committed(&self) -> usize {
        match self {
            KeyedError::OutOfLockSlots { committed, .. }
            | KeyedError::Store { committed, .. }
            | KeyedError::Work { committed, .. } => *committed,
        }
    }

    /// Whether the server ran out of lock slots ([`KeyedError::OutOfLockSlots`]).
    pub fn is_out_of_lock_slots(&self) -> bool {
        matches!(self, KeyedError::OutOfLockSlots { .. })
    }
}

/// Processes batches of keyed items exactly once per key. Made by
/// [`PostgresStore::keyed`]; cheap to clone, and clones share the cached server
/// settings.
#[derive(Debug, Clone)]
pub struct Keyed {
    store: PostgresStore,
    options: KeyedOptions,
    lock_table: Arc<OnceCell<LockTable>>,
}

impl PostgresStore {
    /// A handle that processes keyed batches on this store's pool; see the
    /// [module docs](crate::keyed).
    pub fn keyed(&self, options: KeyedOptions) -> Keyed {
        Keyed {
            store: self.clone(),
            options,
            lock_table: Arc::new(OnceCell::new()),
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
        self.lock_table
            .get_or_try_init(|| read_lock_table(&self.store))
            .await
            .copied()
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

    /// Processes `keys` exactly once per key: for each chunk of the batch, in input
    /// order, one transaction takes the chunk's advisory locks in sorted hash order,
    /// runs `work(txn, chunk)` and commits. `work` writes only its chunk's items;
    /// giving `keys` as the items themselves (`K: AsRef<str>` returning the key) hands
    /// it the items directly. Duplicate keys in a batch are fine (one lock each);
    /// `work` sees them as given. An empty batch runs nothing.
    ///
    /// Each transaction borrows one pooled connection for its duration only: keep
    /// `work` short (a few statements), since other workers wait for its keys.
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
    /// [`KeyedError::Work`] if `work` fails, [`KeyedError::OutOfLockSlots`] if the
    /// server's lock table has no room for a chunk's locks, [`KeyedError::Store`] if the
    /// database fails otherwise. The failing chunk is rolled back; earlier chunks stay
    /// committed ([`KeyedError::committed`]). If a `COMMIT` itself fails, that chunk's
    /// outcome is unknown, as with any commit; processing the batch again is safe.
    ///
    /// # Panics
    /// Only if `work` panics; the panic propagates. The transaction is then dropped,
    /// which rolls it back: the rollback is sent as the connection goes back to the
    /// pool (which tests it on release), so the chunk's locks are released moments
    /// later, not at the connection's next use.
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
        K: AsRef<str> + Sync,
        F: for<'c> FnMut(&'c DatabaseTransaction, &'c [K]) -> FencedFuture<'c, T, E> + Send,
        T: Send,
        E: Send,
    {
        let mut processed = Processed {
            values: Vec::new(),
            locks: 0,
        };
        if keys.is_empty() {
            return Ok(processed);
        }
        let store = |committed| move |source| KeyedError::Store { source, committed };
        let lock_table = self.lock_table().await.map_err(store(0))?;
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
        let mut committed = 0;
        for part in keys.chunks(per_transaction) {
            let statement = |source| Error::statement("process keyed items", source);
            let txn = self
                .store
                .begin()
                .await
                .map_err(|e| store(committed)(statement(e)))?;
            let locks = match self.lock(&txn, part).await {
                Ok(locks) => locks,
                Err(source) => {
                    // The locks (if any) vanish with the rollback; if the rollback fails
                    // the connection is broken and they vanish with its session.
                    let _ = txn.rollback().await;
                    return Err(match sqlstate(&source).as_deref() {
                        Some("53200") => KeyedError::OutOfLockSlots {
                            chunk: part.len(),
                            max_locks_per_transaction: lock_table.max_locks_per_transaction,
                            slots: lock_table.slots(),
                            committed,
                            source,
                        },
                        _ => {
                            store(committed)(Error::statement("take keyed advisory locks", source))
                        }
                    });
                }
            };
            match work(&txn, part).await {
                Ok(value) => {
                    txn.commit()
                        .await
                        .map_err(|e| store(committed)(statement(e)))?;
                    committed += part.len();
                    processed.values.push(value);
                    processed.locks += locks;
                }
                Err(error) => {
                    let _ = txn.rollback().await; // as above
                    return Err(KeyedError::Work { error, committed });
                }
            }
        }
        Ok(processed)
    }

    /// Takes the advisory locks of `keys` on `txn`, in sorted order; returns how many.
    async fn lock<K: AsRef<str>>(
        &self,
        txn: &DatabaseTransaction,
        keys: &[K],
    ) -> Result<u64, DbErr> {
        let names: Vec<String> = keys.iter().map(|k| k.as_ref().to_owned()).collect();
        // The locking call is an output expression of the sorting query, not referenced
        // by its ORDER BY: PostgreSQL evaluates it after the sort, row by row.
        let statement = match self.options.stripes {
            None => Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT count(*) AS locks FROM ( \
                   SELECT pg_advisory_xact_lock(s.id) FROM ( \
                     SELECT DISTINCT hashtextextended(k, 0) AS id FROM unnest($1::text[]) AS k \
                   ) AS s ORDER BY s.id \
                 ) AS l",
                [names.into()],
            ),
            Some(stripes) => Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!(
                    "SELECT count(*) AS locks FROM ( \
                       SELECT pg_advisory_xact_lock({STRIPE_LOCK_CLASS}, s.id) FROM ( \
                         SELECT DISTINCT ((hashtextextended(k, 0) % $2 + $2) % $2)::int4 AS id \
                         FROM unnest($1::text[]) AS k \
                       ) AS s ORDER BY s.id \
                     ) AS l"
                ),
                [names.into(), i64::from(stripes.max(1)).into()],
            ),
        };
        let row = txn
            .query_one_raw(statement)
            .await?
            .ok_or_else(|| DbErr::Custom("the locking statement returned no row".to_owned()))?;
        let locks: i64 = row.try_get("", "locks")?;
        Ok(u64::try_from(locks).unwrap_or(0))
    }
}

async fn read_lock_table(store: &PostgresStore) -> Result<LockTable, Error> {
    const OP: &str = "read the lock table settings";
    let rows = store
        .query(
            OP,
            "SELECT current_setting('max_locks_per_transaction')::int4 AS max_locks_per_transaction, \
                    current_setting('max_connections')::int4 AS max_connections, \
                    current_setting('max_prepared_transactions')::int4 AS max_prepared_transactions",
            Vec::new(),
        )
        .await?;
    let row = rows.first().ok_or_else(|| Error::BadRow {
        operation: OP,
        source: DbErr::Custom("no row returned".to_owned()),
    })?;
    let get = |column: &str| -> Result<u32, Error> {
        let value: i32 = row.try_get("", column).map_err(|source| Error::BadRow {
            operation: OP,
            source,
        })?;
        u32::try_from(value).map_err(|e| Error::BadRow {
            operation: OP,
            source: DbErr::Custom(format!("{column} = {value}: {e}")),
        })
    };
    Ok(LockTable {
        max_locks_per_transaction: get("max_locks_per_transaction")?,
        max_connections: get("max_connections")?,
        max_prepared_transactions: get("max_prepared_transactions")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max_locks_per_transaction: u32, max_connections: u32) -> LockTable {
        LockTable {
            max_locks_per_transaction,
            max_connections,
            max_prepared_transactions: 0,
        }
    }

    #[test]
    fn default_chunk_is_a_sixteenth_of_the_lock_table() {
        // PostgreSQL's defaults.
        assert_eq!(table(64, 100).slots(), 6_400);
        assert_eq!(table(64, 100).default_chunk(), 400);
        // The test server (max_connections = 200).
        assert_eq!(table(64, 200).default_chunk(), 800);
        // Prepared transactions hold locks too.
        let prepared = LockTable {
            max_prepared_transactions: 100,
            ..table(64, 100)
        };
        assert_eq!(prepared.slots(), 12_800);
    }

    #[test]
    fn default_chunk_stays_between_one_and_the_cap() {
        assert_eq!(table(1_024, 1_000).default_chunk(), MAX_DEFAULT_CHUNK);
        assert_eq!(table(10, 1).default_chunk(), 1);
        assert_eq!(table(0, 0).default_chunk(), 1);
    }

    #[test]
    fn options_never_hold_zero() {
        let options = KeyedOptions::default().chunk(0).stripes(0);
        assert_eq!(options.chunk, Some(1));
        assert_eq!(options.stripes, Some(1));
    }
}
