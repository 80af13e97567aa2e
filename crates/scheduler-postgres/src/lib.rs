//! The PostgreSQL lease store for `scheduler-core`, on sea-orm.
//!
//! Leases are rows in a table; every operation is one short, batched statement on a
//! connection borrowed from the pool for that statement only, so holding leases
//! never pins a connection. Migrations run at start-up under a transaction-level
//! advisory lock.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod error;
pub mod fenced;
pub mod history;
mod migrate;
pub mod store;

pub use error::{Error, Result};
pub use fenced::{Fence, FencedError, FencedFuture};
pub use history::{HistoryOptions, HistoryTable, RetentionJob, RunHistory};
pub use scheduler_migrations::TableName;
pub use store::{PostgresOptions, PostgresStore};
