//! The PostgreSQL lease store for `scheduler-core`, on sea-orm.
//!
//! Leases are rows in a table; every operation is one short, batched statement on a
//! connection borrowed from the pool for that statement only, so holding leases
//! never pins a connection. Migrations run at start-up under a transaction-level
//! advisory lock. Beside the store: fenced transactions ([`PostgresStore::fenced`]),
//! exactly-once processing of keyed items under transaction-level advisory locks
//! ([`PostgresStore::keyed`]), an optional run history ([`RunHistory`]), and
//! views for operators and one repair, ending a lease whose holder is gone
//! ([`diagnostics`]).
//!
//! # Operators' controls
//!
//! The store implements [`scheduler_core::Controls`] ([`Store::controls`] returns
//! it): pauses, resumes, triggers and dynamic schedules are rows in tables named
//! after the lease table (`<table>_controls`, `_audit`, `_triggers`, `_schedules`,
//! `_handlers`, `_version`; migration `m20261202_000003_controls`; `_jobs`, the jobs
//! each instance runs, migration `m20261204_000004_jobs`; `_instances`, their
//! heartbeats, migration `m20261204_000005_instances`). A pause is a
//! condition of the batched take itself (a paused job's request is refused without
//! a write and reported in [`Taken::paused`]), so the app's database user needs
//! `SELECT` on `<table>_controls` beside its rights on the lease table (and, to
//! beat, `INSERT` and `UPDATE` on `<table>_instances`). Each control
//! is one statement that also writes its audit row and bumps the control version;
//! a trigger is claimed in one statement that takes the job's lease only when it is
//! free, so exactly one instance runs it; [`Controls::poll`] reads the version alone
//! while nothing changed. Like the lease statements, all of them work behind
//! PgBouncer's transaction pooling.
//!
//! Each dynamic schedule also carries its bound, `next_tick` (migration
//! `m20261205_000007_next_tick`), written by every put: an instance reads the rows
//! due by an instant from a partial index on `(next_tick, name)`
//! ([`Controls::due_schedules`]) and moves their bounds forward with one `UPDATE` of
//! that column ([`Controls::advance_schedules`]; `UPDATE` on `<table>_schedules`),
//! which is not a control: no version bump, no audit row.
//!
//! [`Store::controls`]: scheduler_core::Store::controls
//! [`Taken::paused`]: scheduler_core::Taken::paused
//! [`Controls::poll`]: scheduler_core::Controls::poll
//! [`Controls::due_schedules`]: scheduler_core::Controls::due_schedules
//! [`Controls::advance_schedules`]: scheduler_core::Controls::advance_schedules
//!
//! # Your own pool
//!
//! An app that already has a `sqlx::PgPool` hands it over through sea-orm, which
//! this crate re-exports ([`sea_orm`], and sqlx as `sea_orm::sqlx`) so the versions
//! match:
//!
//! ```no_run
//! use scheduler_postgres::sea_orm::{SqlxPostgresConnector, sqlx::PgPool};
//! use scheduler_postgres::{PostgresOptions, PostgresStore};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = PgPool::connect("postgres://app@db/app").await?;
//! let db = SqlxPostgresConnector::from_sqlx_postgres_pool(pool.clone());
//! let store = PostgresStore::open(db, PostgresOptions::default()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The pool stays the app's (a clone shares it): each lease statement borrows a
//! connection for that statement only. The app's sqlx must be the version sea-orm
//! uses (sqlx 0.9); `scheduler_postgres::sea_orm::sqlx` is that one.
//!
//! # TLS
//!
//! The `rustls` feature (default) connects with rustls (`sslmode=require` and
//! friends in the URL); `native-tls` uses the platform's library (OpenSSL on Linux)
//! instead; with neither (`default-features = false`) connections are plain TCP.
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod controls;
mod controls_sql;
pub mod diagnostics;
pub mod error;
pub mod fenced;
mod guard;
mod hints;
pub mod history;
mod hosts;
pub mod keyed;
mod migrate;
pub mod options;
mod pauses;
mod row;
mod session;
mod sql;
pub mod store;
mod watch;

pub use error::{Error, Result};
pub use fenced::{Fence, FencedError, FencedFuture};
pub use history::{HistoryOptions, HistoryTable, RetentionJob, RunHistory};
pub use keyed::{Keyed, KeyedError, KeyedOptions, KeyedTransaction, LockTable, Processed};
pub use options::{PostgresOptions, connect_options};
pub use scheduler_migrations::TableName;
/// The sea-orm this crate is built on (and sqlx as `sea_orm::sqlx`): for handing the
/// store a pool of the app's own, and for the transactions of fenced and keyed work.
pub use sea_orm;
pub use store::PostgresStore;
