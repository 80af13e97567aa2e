//! The PostgreSQL lease store for `scheduler-core`, on sea-orm.
//!
//! Leases are rows in a table; every operation is one short, batched statement on a
//! connection borrowed from the pool for that statement only, so holding leases
//! never pins a connection. Migrations run at start-up under a transaction-level
//! advisory lock. Beside the store: fenced transactions ([`PostgresStore::fenced`]),
//! exactly-once processing of keyed items under transaction-level advisory locks
//! ([`PostgresStore::keyed`]), an optional run history ([`RunHistory`]), and
//! read-only views for operators ([`diagnostics`]).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod diagnostics;
pub mod error;
pub mod fenced;
mod hints;
pub mod history;
pub mod keyed;
mod migrate;
pub mod options;
mod row;
mod session;
mod sql;
pub mod store;

pub use error::{Error, Result};
pub use fenced::{Fence, FencedError, FencedFuture};
pub use history::{HistoryOptions, HistoryTable, RetentionJob, RunHistory};
pub use keyed::{Keyed, KeyedError, KeyedOptions, LockTable, Processed};
pub use options::{PostgresOptions, connect_options};
pub use scheduler_migrations::TableName;
pub use store::PostgresStore;
