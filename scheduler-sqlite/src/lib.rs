//! The embedded SQLite lease store for `scheduler-core`, on sea-orm: one machine,
//! no server.
//!
//! Leases are rows in a table of one SQLite file. Every process of the machine that
//! opens the file shares them: SQLite's file locks make each take atomic across
//! processes, and its clock (not the callers') measures every expiry. Every
//! operation is batched and borrows a pooled connection for itself only (one
//! statement; for a take, one upsert and one read in a short transaction), so
//! holding leases never pins a connection.
//!
//! The file is created if missing, kept in WAL journal mode with
//! `synchronous = FULL` (a granted lease is on disk before the job runs: see
//! [`SqliteStore`] for why), and its schema is created in a `BEGIN IMMEDIATE`
//! transaction, so several processes may open one new file at once.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
//! use scheduler_sqlite::{SqliteOptions, SqliteStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let options = SqliteOptions::default().busy_timeout(Duration::from_secs(10));
//! let store = SqliteStore::open("/var/lib/app/scheduler.db", options).await?;
//!
//! let tick = Tick::new(store.now().await?);
//! let ttl = Ttl::new(Duration::from_secs(30))?;
//! let taken = store.take(&[TakeRequest::new(LeaseName::new("sweep")?, tick)], ttl).await?;
//! for lease in &taken.won {
//!     // … run the tick's work, renewing every ttl/4 …
//!     store.release(&[lease.key()], Release::Completed).await?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The store also keeps the operators' controls
//! ([`Store::controls`](scheduler_core::Store::controls) returns them): pauses,
//! resumes, triggers, dynamic schedules and the record of who applied each, in
//! tables beside the lease table that the same migrations create. A pause is a
//! condition of the batched take itself: a request naming a paused job
//! ([`TakeRequest::control`](scheduler_core::TakeRequest::control)) writes nothing
//! and comes back in [`Taken::paused`](scheduler_core::Taken::paused), so an
//! instance that has not yet polled the controls cannot run it. Each control is one
//! `BEGIN IMMEDIATE` transaction that bumps the control version instances poll and
//! appends its audit row; a trigger is claimed once, under the job's own lease. A
//! [`RunHistory`] records every finished run in a table of its own, which
//! [`Controls::runs`](scheduler_core::Controls::runs) reads.
//!
//! Bad input gets a typed [`Error`] that says what to do: a directory that does
//! not exist ([`Error::MissingDirectory`]), a read-only file or directory
//! ([`Error::ReadOnly`]), a file that is not a database ([`Error::Open`]), a lock
//! held by another process beyond the busy timeout ([`Error::Busy`]).
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod batch;
mod control;
mod control_sql;
pub mod error;
pub mod history;
mod migrate;
mod open;
mod options;
mod row;
mod sql;
mod store;

pub use error::{Error, Result};
pub use history::{HistoryOptions, HistoryTable, RetentionJob, RunHistory};
pub use options::SqliteOptions;
pub use scheduler_migrations::TableName;
pub use store::SqliteStore;
