//! [`PoolGuard`]: the store's pool hands out no connection a failover left behind.
//!
//! After a switchover a pool holds connections to the demoted server: they answer
//! `25006` (read-only) to every write, or were ended by its restart. sqlx closes a
//! connection whose socket broke when it comes back to the pool (its release
//! `ping`), but a live connection to a read-only server goes back and is handed out
//! again, to the store's statements and the app's alike: every retry of a write
//! fails on the next one.
//!
//! So after a statement on the pool failed — any statement, the app's through
//! [`PostgresStore::connection`](crate::PostgresStore::connection) included (the
//! pool's metric callback sees every sea-orm statement end, the error itself not
//! shown; sea-orm's `execute_unprepared` bypasses it, but the store's own next lease
//! statement meets the same server within a second) — the next connections handed
//! out are checked first, one each, as
//! many as the pool may hold: one statement, `pg_is_in_recovery() OR
//! transaction_read_only`. A connection found read-only is closed, and so is every
//! connection opened before it was found (they reach the same server): the next
//! one is new, and a new connection is checked at connect when the URL asks for
//! `target_session_attrs=read-write` or `primary` (see [`crate::hosts`]). A lease
//! statement that fails for a lost or read-only server owes the checks too. The
//! cost when nothing is wrong: an atomic read per connection handed out; after an
//! unrelated failure (a violated constraint), up to `max_connections` short
//! statements.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sea_orm::sqlx::pool::PoolConnectionMetadata;
use sea_orm::sqlx::postgres::PgConnection;
use sea_orm::sqlx::{self, Row};

/// The checks of one pool, shared by its hooks, its sessions and its metric
/// callback.
#[derive(Debug)]
pub(crate) struct PoolGuard {
    /// What [`stale_before`](Self::stale_before) counts from.
    base: Instant,
    /// Connections opened before this instant (nanoseconds after `base`; 0: none)
    /// are closed instead of handed out.
    stale_before: AtomicU64,
    /// How many connections to check before they are handed out.
    owed: AtomicUsize,
    /// How many connections the pool may hold: the checks owed after a failure.
    size: usize,
}

/// The one statement a check runs.
const READ_ONLY: &str = "SELECT pg_catalog.pg_is_in_recovery() \
     OR pg_catalog.current_setting('transaction_read_only') = 'on'";

impl PoolGuard {
    /// The guard of a pool of at most `size` connections.
    pub(crate) fn new(size: u32) -> Self {
        Self {
            base: Instant::now(),
            stale_before: AtomicU64::new(0),
            owed: AtomicUsize::new(0),
            size: usize::try_from(size).unwrap_or(usize::MAX).max(1),
        }
    }

    /// A statement on the pool failed: the next connections handed out, one for each
    /// the pool may hold, are checked first.
    pub(crate) fn failed(&self) {
        self.owed.fetch_max(self.size, Ordering::AcqRel);
    }

    /// Whether a connection is still owed a check (and takes the check if so).
    fn take_check(&self) -> bool {
        self.owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Nanoseconds from `base` to `at` (0 before it).
    fn since_base(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Every connection opened until now is closed instead of handed out.
    fn all_stale(&self) {
        self.stale_before
            .fetch_max(self.since_base(Instant::now()), Ordering::AcqRel);
    }

    /// Whether a connection of age `age` was opened before the pool's connections
    /// were last found stale.
    fn is_stale(&self, age: Duration) -> bool {
        let stale_before = self.stale_before.load(Ordering::Acquire);
        stale_before != 0
            && Instant::now()
                .checked_sub(age)
                .is_none_or(|opened| self.since_base(opened) < stale_before)
    }

    /// The pool's `before_acquire`: whether `conn` may be handed out.
    ///
    /// # Errors
    /// The check's answer undecodable (sqlx then closes the connection).
    pub(crate) async fn before_acquire(
        &self,
        conn: &mut PgConnection,
        meta: PoolConnectionMetadata,
    ) -> Result<bool, sqlx::Error> {
        if self.is_stale(meta.age) {
            return Ok(false);
        }
        if !self.take_check() {
            return Ok(true);
        }
        // A connection the check cannot use (the server went away: the failure that
        // owed the check) is closed quietly, not handed out.
        let read_only = match sqlx::query(READ_ONLY).fetch_one(conn).await {
            Ok(row) => row.try_get::<bool, _>(0)?,
            Err(err) => {
                tracing::debug!(error = %err, "a pooled connection failed its check: closed");
                return Ok(false);
            }
        };
        if read_only {
            tracing::info!(
                "a pooled connection reaches a read-only server (a demoted primary, a standby): \
                 closing it and every connection opened before it"
            );
            self.all_stale();
        }
        Ok(!read_only)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_owes_one_check_per_connection_the_pool_may_hold() {
        let guard = PoolGuard::new(3);
        assert!(!guard.take_check(), "nothing owed before a failure");
        guard.failed();
        guard.failed();
        assert!(guard.take_check() && guard.take_check() && guard.take_check());
        assert!(!guard.take_check(), "three owed, not six");
    }

    #[test]
    fn connections_opened_before_a_stale_mark_are_stale_and_later_ones_not() {
        let guard = PoolGuard::new(3);
        let old = Duration::from_secs(3600);
        assert!(!guard.is_stale(old), "no mark yet");
        std::thread::sleep(Duration::from_millis(2));
        guard.all_stale();
        assert!(guard.is_stale(old));
        std::thread::sleep(Duration::from_millis(2));
        assert!(!guard.is_stale(Duration::ZERO), "opened after the mark");
    }
}
