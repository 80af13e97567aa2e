//! The contract between the runtime and a lease store.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::control::Controls;
use crate::error::Result;
use crate::lease::{LeaseKey, LeaseName, Release, Renewed, TakeRequest, Taken, Tick, Ttl};

/// A backend that keeps leases: PostgreSQL for clusters, SQLite for one machine, the
/// [`MemoryStore`](crate::MemoryStore) for unit tests.
///
/// Every operation is **batched** (one call, and for SQL stores one statement, per
/// batch) and every time it uses comes from the store's own clock, never from the
/// caller's. Only the store decides who holds a lease.
///
/// The rules every implementation keeps, and that the shared invariant tests check:
/// - a lease is free for a tick when it has expired and either was taken for an
///   earlier tick, or was taken for this very tick and never released as completed
///   (its holder vanished: the tick may be retried);
/// - taking is atomic per name: of concurrent takers of one name, at most one wins;
/// - each acquisition of a name gets a larger fencing token than every one before;
/// - renewals and releases act only when the holder matches, so a former holder can
///   never touch a lease taken since.
///
/// Cancel safety: dropping a returned future may leave the operation applied or not;
/// callers treat that like a failed call and retry with fresh holders.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Takes every lease of `requests` that is free for its tick, for `ttl`, in one
    /// round trip. Returns the leases won and, for the requests lost (the lease is
    /// held, or its tick already ran), the state of each lease as the take saw it.
    ///
    /// # Errors
    /// [`Error::DuplicateInBatch`](crate::Error::DuplicateInBatch) if a name repeats,
    /// [`Error::Store`](crate::Error::Store) if the backend fails.
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> Result<Taken>;

    /// Extends each lease of `leases` still held by its holder to `ttl` from now.
    /// Returns the renewed ones; a lease not returned is **lost**.
    ///
    /// # Errors
    /// As [`Store::take`].
    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> Result<Vec<Renewed>>;

    /// Gives back each lease of `leases` still held by its holder, as `how` says,
    /// keeping the row (and so the record of its tick). Returns the names released.
    ///
    /// # Errors
    /// As [`Store::take`].
    async fn release(&self, leases: &[LeaseKey], how: Release) -> Result<Vec<LeaseName>>;

    /// The store's clock: the time every expiry is measured on.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the backend fails.
    async fn now(&self) -> Result<DateTime<Utc>>;

    /// Asks the holder of lease `name` to stop its run, on behalf of the job's newer
    /// tick `newer` (overlap policy [`Overlap::CancelRunning`](crate::Overlap)): marks
    /// the row when it is held, unexpired and unreleased, for a tick older than
    /// `newer`. The holder's next [`renew`](Store::renew) reports it
    /// ([`Renewed::cancel_requested`]). Returns whether a row was marked.
    ///
    /// The default marks nothing: on a store without it, a newer tick waits for the
    /// running one to end, as with [`Overlap::BufferOne`](crate::Overlap). A store
    /// that wraps another must forward it.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the backend fails.
    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> Result<bool> {
        let _ = (name, newer);
        Ok(false)
    }

    /// Creates a row for each lease of `names` that has none yet: free, released as
    /// completed, its tick the store's now, so that no tick from before can ever be
    /// taken under it. Returns the names it created. The runtime calls it at
    /// start-up for its jobs' leases: a job whose lease had no row is new to the
    /// cluster, and its ticks from before it first existed are not caught up (as a
    /// Kubernetes CronJob or a Temporal schedule never runs times from before it was
    /// created), while a job whose row exists catches up what an outage missed.
    ///
    /// The default creates nothing: on a store without it, start-up catches up ticks
    /// from before a job existed, as the catch-up policy says. A store that wraps
    /// another must forward it.
    ///
    /// # Errors
    /// [`Error::Store`](crate::Error::Store) if the backend fails.
    async fn create_missing(&self, names: &[LeaseName]) -> Result<Vec<LeaseName>> {
        let _ = names;
        Ok(Vec::new())
    }

    /// The store's controls (pause, resume, trigger, dynamic schedules, their
    /// record), or `None` for a store that keeps none: the runtime then polls
    /// nothing, and takes carry no pause condition a store would honour. A store
    /// that wraps another must forward it.
    fn controls(&self) -> Option<&dyn Controls> {
        None
    }
}

/// A shared store is a store: `Scheduler::builder(Arc::new(store))` and
/// `Scheduler::builder(store)` both work.
#[async_trait]
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    async fn take(&self, requests: &[TakeRequest], ttl: Ttl) -> Result<Taken> {
        (**self).take(requests, ttl).await
    }

    async fn renew(&self, leases: &[LeaseKey], ttl: Ttl) -> Result<Vec<Renewed>> {
        (**self).renew(leases, ttl).await
    }

    async fn release(&self, leases: &[LeaseKey], how: Release) -> Result<Vec<LeaseName>> {
        (**self).release(leases, how).await
    }

    async fn now(&self) -> Result<DateTime<Utc>> {
        (**self).now().await
    }

    async fn request_cancel(&self, name: &LeaseName, newer: Tick) -> Result<bool> {
        (**self).request_cancel(name, newer).await
    }

    async fn create_missing(&self, names: &[LeaseName]) -> Result<Vec<LeaseName>> {
        (**self).create_missing(names).await
    }

    fn controls(&self) -> Option<&dyn Controls> {
        (**self).controls()
    }
}
