//! Distributed job scheduling on database leases that never pin a pooled connection.
//!
//! Periodic background work (sweeps, alert evaluation, checks) runs exactly once
//! per tick across a fleet of app instances, or once per tick per node, coordinated
//! through lease rows in a database table. Every lease operation is one short,
//! batched statement: no connection is held while a job runs.
//!
//! This crate holds the contract: the lease model ([`LeaseName`], [`Holder`],
//! [`Tick`], [`FencingToken`], [`Lease`]), the [`Store`] trait the backends
//! implement, and an in-memory store for unit tests. It has no SQL.
//!
//! ```
//! use std::time::Duration;
//! use scheduler_core::{LeaseName, MemoryStore, Store, TakeRequest, Tick, Ttl};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> scheduler_core::Result<()> {
//! let store = MemoryStore::new();
//! let tick = Tick::new(store.now().await?);
//! let ttl = Ttl::new(Duration::from_secs(30))?;
//! let won = store.take(&[TakeRequest::new(LeaseName::new("sweep")?, tick)], ttl).await?;
//! assert_eq!(won.len(), 1);
//! // A second instance asking for the same tick gets nothing.
//! let lost = store.take(&[TakeRequest::new(LeaseName::new("sweep")?, tick)], ttl).await?;
//! assert!(lost.is_empty());
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod clock;
pub mod error;
pub mod job;
pub mod lease;
pub mod memory;
mod runtime;
pub mod schedule;
pub mod store;

pub use clock::LocalClock;
pub use error::{BoxError, Error, Result};
pub use lease::{
    FencingToken, Holder, Lease, LeaseKey, LeaseName, Release, Renewed, TakeRequest, Tick, Ttl,
};
pub use job::{Declaration, Duplicate, Idempotent, JobContext, Scope};
pub use memory::MemoryStore;
pub use runtime::{Health, HealthReport, Outcome, Scheduler, SchedulerBuilder, Stats};
pub use schedule::{Schedule, ScheduleError, parse_duration};
pub use store::Store;
pub use tokio_util::sync::CancellationToken;

#[doc(hidden)]
pub use async_trait::async_trait;
