//! How a [`Keyed`](super::Keyed) handle splits batches and locks keys, and the server
//! settings that bound it.

/// The largest default chunk, in keys. Bigger transactions add latency (every key of
/// the chunk waits for the slowest lock and the commit) without adding throughput.
pub const MAX_DEFAULT_CHUNK: usize = 1_000;

/// The default chunk takes at most this fraction (1/N) of the server's lock table.
const LOCK_TABLE_SHARE: u64 = 16;

/// The advisory lock class id (first `int4` of the two-key form) of lock stripes:
/// `"keyd"` in ASCII.
pub const STRIPE_LOCK_CLASS: i32 = 0x6b65_7964;

/// How a [`Keyed`](super::Keyed) handle splits batches and locks keys.
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
    /// [`KeyedError::OutOfLockSlots`](super::KeyedError::OutOfLockSlots).
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
