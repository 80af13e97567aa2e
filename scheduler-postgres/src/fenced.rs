//! Fenced transactions: writes that only commit while the lease is still held with
//! the run's fencing token.

use std::future::Future;
use std::pin::Pin;

use scheduler_core::{FencingToken, Holder, JobContext, LeaseName};
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, Statement};

use crate::error::Error;
use crate::store::PostgresStore;

/// What a fenced write carries: the lease, the holder and the token of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The lease.
    pub name: LeaseName,
    /// The holder of the run's acquisition.
    pub holder: Holder,
    /// The run's fencing token.
    pub token: FencingToken,
}

impl From<&JobContext> for Fence {
    fn from(ctx: &JobContext) -> Self {
        Self {
            name: ctx.lease().clone(),
            holder: ctx.holder().clone(),
            token: ctx.token(),
        }
    }
}

/// Why a fenced transaction did not commit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FencedError<E> {
    /// The lease was taken over, expired or released: nothing was written.
    #[error(
        "lease {name:?} with fencing token {token} is no longer held; the fenced write was refused"
    )]
    LeaseLost {
        /// The lease.
        name: String,
        /// The token the write carried.
        token: i64,
    },
    /// The database failed; the transaction was rolled back.
    #[error(transparent)]
    Store(Error),
    /// The caller's work failed; the transaction was rolled back.
    #[error("the fenced work failed: {0}")]
    Work(E),
}

impl<E> FencedError<E> {
    /// Whether the write was refused because the lease is no longer held.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, FencedError::LeaseLost { .. })
    }
}

/// The boxed future a fenced closure returns.
pub type FencedFuture<'c, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'c>>;

impl PostgresStore {
    /// Runs `work` in one transaction that commits only while `fence`'s lease is
    /// still held, unexpired, by its holder with its token. The transaction runs at
    /// `READ COMMITTED`, whatever the database's default isolation level.
    ///
    /// The lease is checked twice. Before `work`, a plain read refuses a lease
    /// already lost without running the work. After it, just before `COMMIT`, the
    /// lease row is read again under a row lock (`SELECT … FOR UPDATE`, against the
    /// database's clock at that moment): a takeover that committed meanwhile fails
    /// the check, and a later one waits for the lock, so it is ordered after a
    /// fenced write that passed it. A write by a holder whose lease was taken fails
    /// with [`FencedError::LeaseLost`] and writes nothing.
    ///
    /// The row lock is held only from that check to the commit, never while `work`
    /// runs: the instance's renewals (one statement for all its leases, which would
    /// wait for the lock) go through while a long `work` runs, and keep its lease.
    ///
    /// Keep `work` reasonably short all the same: it holds a pooled connection, and a
    /// pause between two of its statements longer than the store's
    /// [`idle_transaction_timeout`](crate::PostgresOptions::idle_transaction_timeout)
    /// ends the transaction.
    ///
    /// ```no_run
    /// use scheduler_postgres::{Fence, FencedError, PostgresStore};
    /// use sea_orm::ConnectionTrait;
    ///
    /// # async fn pay(store: &PostgresStore, ctx: &scheduler_core::JobContext) -> Result<(), Box<dyn std::error::Error>> {
    /// let fence = Fence::from(ctx);
    /// store
    ///     .fenced(&fence, |txn| Box::pin(async move {
    ///         txn.execute_unprepared("UPDATE accounts SET paid = true WHERE id = 1").await?;
    ///         Ok::<_, sea_orm::DbErr>(())
    ///     }))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`FencedError::LeaseLost`] if the lease is no longer held with this token,
    /// before or after `work`, [`FencedError::Work`] if `work` fails,
    /// [`FencedError::Store`] if the database does. The transaction is rolled back in
    /// every case (also if `work` panics: the transaction is dropped, which rolls it
    /// back).
    pub async fn fenced<T, E, F>(&self, fence: &Fence, work: F) -> Result<T, FencedError<E>>
    where
        F: for<'c> FnOnce(&'c DatabaseTransaction) -> FencedFuture<'c, T, E> + Send,
        T: Send,
        E: Send,
    {
        let statement =
            |source| FencedError::Store(Error::statement("run a fenced transaction", source));
        // At READ COMMITTED whatever the database's default: the check after the
        // work must see a takeover (or a renewal) committed since the check before
        // it, not fail on it as a serialization conflict.
        let txn = self.begin_read_committed().await.map_err(statement)?;
        if !self.holds(&txn, fence, false).await.map_err(statement)? {
            txn.rollback().await.map_err(statement)?;
            return Err(lost(fence));
        }
        match work(&txn).await {
            Ok(value) => {
                if !self.holds(&txn, fence, true).await.map_err(statement)? {
                    txn.rollback().await.map_err(statement)?;
                    return Err(lost(fence));
                }
                txn.commit().await.map_err(statement)?;
                Ok(value)
            }
            Err(err) => {
                txn.rollback().await.map_err(statement)?;
                Err(FencedError::Work(err))
            }
        }
    }

    /// Whether `fence`'s lease is held, unexpired on the database's clock now, by its
    /// holder with its token, read in `txn`; `locked`: under `FOR UPDATE`.
    async fn holds(
        &self,
        txn: &DatabaseTransaction,
        fence: &Fence,
        locked: bool,
    ) -> Result<bool, sea_orm::DbErr> {
        let lock = if locked { " FOR UPDATE" } else { "" };
        let sql = format!(
            "SELECT 1 AS held FROM {} WHERE name = $1 AND holder = $2 AND token = $3 \
             AND released_at IS NULL AND expires_at > clock_timestamp(){lock}",
            self.table().quoted()
        );
        let check = Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            [
                fence.name.as_str().into(),
                fence.holder.as_str().into(),
                fence.token.get().into(),
            ],
        );
        Ok(txn.query_one_raw(check).await?.is_some())
    }
}

/// The refusal of a write whose lease is no longer held with its token.
fn lost<E>(fence: &Fence) -> FencedError<E> {
    FencedError::LeaseLost {
        name: fence.name.to_string(),
        token: fence.token.get(),
    }
}
