//! A scheduler database as operators see it, as typed rows: every lease of a lease
//! table with its job's last run ([`lease_status`]), and the sessions that hold or
//! wait for advisory locks ([`advisory_locks`]); and the one repair, ending a lease
//! whose holder is gone ([`forget_lease`]). `scheduler-cli` renders them.
//!
//! The statements run like the store's own (each on a connection borrowed for it,
//! unnamed in a transaction of its own behind PgBouncer's transaction pooling), so
//! they work wherever the store works. Only [`forget_lease`] writes, and it deletes
//! nothing: lease rows are kept for their fencing tokens.
//!
//! ```no_run
//! use scheduler_postgres::{PostgresOptions, PostgresStore, diagnostics};
//!
//! # async fn demo() -> scheduler_postgres::Result<()> {
//! let options = PostgresOptions::default().migrate(false);
//! let store = PostgresStore::connect("postgres://app@db/app", options).await?;
//! if let Some(status) = diagnostics::lease_status(&store, store.table()).await? {
//!     for lease in &status.leases {
//!         println!("{} {:?} until {}", lease.lease, lease.state, lease.expires_at);
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod forget;
mod locks;
mod status;

use sea_orm::{DbErr, QueryResult};

use crate::error::{Error, Result};

pub use forget::{Forgotten, forget_lease};
pub use locks::{AdvisoryLock, AdvisoryLocks, advisory_locks};
pub use status::{LastRun, LeaseState, LeaseStatus, LeaseTableStatus, lease_status};

/// The one row a statement of one row returned.
fn first<'r>(rows: &'r [QueryResult], operation: &'static str) -> Result<&'r QueryResult> {
    rows.first().ok_or_else(|| Error::BadRow {
        operation,
        cause: DbErr::RecordNotFound("no row".to_owned()),
    })
}
