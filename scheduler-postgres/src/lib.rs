//! The PostgreSQL lease store for `scheduler-core`, on sea-orm.
//!
//! Leases are rows in a table; every operation is one short, batched statement on a
//! connection borrowed from the pool for that statement only, so holding leases
//! never pins a connection. Migrations run at start-up under a transaction-level
//! advisory lock. Beside the store: fenced transactions ([`PostgresStore::fenced`]),
//! exactly-once processing of keyed items under transaction-level advisory locks
//! ([`PostgresStore::keyed`]), and an optional run history ([`RunHistory`]).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod error;
pub mod fenced;
pub mod history;
pub mod keyed;
mod migrate;
pub mod store;

pub use error::{Error, Result};
pub use fenced::{Fence, FencedError, FencedFuture};
pub use history::{HistoryOptions, HistoryTable, RetentionJob, RunHistory};
pub use keyed::{Keyed, KeyedError, KeyedOptions, LockTable, Processed};
pub use scheduler_migrations::TableName;
pub use store::{
    OutOfRange, PostgresOptions, PostgresStore, connect_options, timestamp_out_of_range,
};
