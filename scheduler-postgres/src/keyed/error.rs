//! [`KeyedError`]: why a keyed batch did not complete.

use sea_orm::DbErr;

use crate::error::Error;

/// Why a keyed batch did not complete. The failing chunk was rolled back; the chunks
/// before it stay committed: `keys[..committed()]` are done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyedError<E> {
    /// A key is not valid PostgreSQL `text`: it contains a NUL byte (`\0`), which no
    /// `text` value can hold. The batch is checked before its first transaction
    /// begins, so nothing of it was processed.
    #[error(
        "key {index} of the batch (counting from 0) contains a NUL byte, which PostgreSQL \
         text cannot hold: strip or encode it before processing (nothing of the batch was \
         processed)"
    )]
    NulInKey {
        /// The position of the first such key in the batch, from 0.
        index: usize,
    },
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
        /// The lock table's nominal size, [`LockTable::slots`](super::LockTable::slots).
        slots: u64,
        /// How many keys, from the start of the batch, were committed before.
        committed: usize,
        /// The driver's error.
        cause: DbErr,
    },
    /// The database failed.
    #[error("{cause} (the first {committed} keys of the batch were committed before)")]
    Store {
        /// The store's error.
        cause: Error,
        /// How many keys, from the start of the batch, were committed before.
        committed: usize,
    },
    /// The caller's work returned `Ok`, but the last statement it ran had failed on
    /// the server, which aborted the chunk's transaction (PostgreSQL then refuses
    /// every statement but a rollback, and turns `COMMIT` into a rollback): the chunk
    /// was rolled back, nothing of it written. Return the statement's error from the
    /// work instead, or recover with `ROLLBACK TO SAVEPOINT` before going on.
    #[error(
        "the keyed work returned Ok, but its last statement had failed ({cause}), which \
         aborted the chunk's transaction: it was rolled back, nothing of it written (the \
         first {committed} keys of the batch were committed before)"
    )]
    Aborted {
        /// The failed statement's error.
        cause: DbErr,
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
    /// How many keys, from the start of the batch, were committed before the failure
    /// (counting every repeat of a committed key too).
    pub fn committed(&self) -> usize {
        match self {
            KeyedError::NulInKey { .. } => 0,
            KeyedError::OutOfLockSlots { committed, .. }
            | KeyedError::Aborted { committed, .. }
            | KeyedError::Store { committed, .. }
            | KeyedError::Work { committed, .. } => *committed,
        }
    }

    /// Whether the server ran out of lock slots ([`KeyedError::OutOfLockSlots`]).
    pub fn is_out_of_lock_slots(&self) -> bool {
        matches!(self, KeyedError::OutOfLockSlots { .. })
    }
}
