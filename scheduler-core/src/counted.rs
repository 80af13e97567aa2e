//! [`Counted`]: any store, with its calls counted (feature `test-util`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::lease::{LeaseKey, LeaseName, Release, Renewed, TakeRequest, Taken, Tick, Ttl};
use crate::store::Store;

/// A [`Store`] that counts the calls made through it, by operation: for tests and
/// benchmarks that check how many statements the runtime sends.
///
/// ```
/// use scheduler_core::{MemoryStore, counted::Counted};
///
/// let store = Counted::new(MemoryStore::new());
/// let calls = store.calls();
/// assert_eq!(calls.takes(), 0);
/// ```
#[derive(Debug)]
pub struct Counted<S> {
    inner: S,
    calls: CallCounts,
}

/// The counts of a [`Counted`] store, shared: read them while the store is in use.
#[derive(Debug, Clone, Default)]
pub struct CallCounts(Arc<[AtomicU64; 5]>);

const TAKE: usize = 0;
const RENEW: usize = 1;
const RELEASE: usize = 2;
const NOW: usize = 3;
/// Takes that returned an error (also counted in [`TAKE`]).
const FAILED_TAKE: usize = 4;

impl CallCounts {
    fn add(&self, op: usize) {
        self.0[op].fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self, op: usize) -> u64 {
        self.0[op].load(Ordering::Relaxed)
    }

    /// Calls of [`Store::take`].
    pub fn takes(&self) -> u64 {
        self.get(TAKE)
    }

    /// Calls of [`Store::renew`].
    pub fn renewals(&self) -> u64 {
        self.get(RENEW)
    }

    /// Calls of [`Store::release`].
    pub fn releases(&self) -> u64 {
        self.get(RELEASE)
    }

    /// Calls of [`Store::now`].
    pub fn clock_reads(&self) -> u64 {
        self.get(NOW)
    }

    /// Calls of [`Store::take`] that returned an error (a statement timeout, a lost
    /// connection); they are also counted in [`takes`](Self::takes). The runtime tries
    /// such a take again, so on a loaded machine `takes` can exceed the ticks asked
    /// for by these.
    pub fn failed_takes(&self) -> u64 {
        self.get(FAILED_TAKE)
    }

    /// Every call.
    pub fn total(&self) -> u64 {
        (0..4).map(|op| self.get(op)).sum()
    }
}

impl<S: Store> Counted<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            calls: CallCounts::default(),
        }
    }

    /// The counts, shared with the store.
    pub fn calls(&self) -> CallCounts {
        self.calls.clone()
    }
}

#[async_trait]
impl<S: Store> Store for Counted<S> {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> Result<Taken> {
        self.calls.add(TAKE);
        let taken = self.inner.take(requests, ttl).await;
        if taken.is_err() {
            self.calls.add(FAILED_TAKE);
        }
        taken
    }

    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> Result<Vec<Renewed>> {
        self.calls.add(RENEW);
        self.inner.renew(leases, ttl).await
    }

    async fn release(&self, leases: &[LeaseKey], how: Release) -> Result<Vec<LeaseName>> {
        self.calls.add(RELEASE);
        self.inner.release(leases, how).await
    }

    async fn now(&self) -> Result<DateTime<Utc>> {
        self.calls.add(NOW);
        self.inner.now().await
    }

    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> Result<bool> {
        self.inner.request_cancel(name, newer).await
    }

    async fn create_missing(&self, names: &[LeaseName]) -> Result<Vec<LeaseName>> {
        self.inner.create_missing(names).await
    }

    /// The inner store's controls, not counted (the lease statements are what
    /// this wrapper measures).
    fn controls(&self) -> Option<&dyn crate::Controls> {
        self.inner.controls()
    }
}
