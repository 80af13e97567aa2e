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
    /// Runs `work` in one short transaction that first checks, under a row lock on the
    /// lease row (`SELECT … FOR UPDATE`), that `fence`'s lease is still held, unexpired,
    /// by its holder with its token; then commits `work`'s writes.
    ///
    /// A takeover of the lease waits for the row lock, so it is ordered after a
    /// fenced write that passed the check; a write by a holder whose lease was taken
    /// since fails with [`FencedError::LeaseLost`] and writes nothing.
    ///
    /// Keep `work` short: it holds a pooled connection and the lease row's lock.
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
    /// [`FencedError::Work`] if `work` fails, [`FencedError::Store`] if the database
    /// does. The transaction is rolled back in every case (also if `work` panics:
    /// the transaction is dropped, which rolls it back).
    pub async fn fenced<T, E, F>(&self, fence: &Fence, work: F) -> Result<T, FencedError<E>>
    where
        F: for<'c> FnOnce(&'c DatabaseTransaction) -> FencedFuture<'c, T, E> + Send,
        T: Send,
        E: Send,
    {
        let statement =
            |source| FencedError::Store(Error::statement("run a fenced transaction", source));
        let txn = self.begin().await.map_err(statement)?;
        let check = Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "SELECT 1 AS held FROM {} WHERE name = $1 AND holder = $2 AND token = $3 \
                 AND released_at IS NULL AND expires_at > now() FOR UPDATE",
                self.table().quoted()
            ),
            [
                fence.name.as_str().into(),
                fence.holder.as_str().into(),
                fence.token.get().into(),
            ],
        );
        let held = txn.query_one_raw(check).await.map_err(statement)?.is_some();
        if !held {
            txn.rollback().await.map_err(statement)?;
            return Err(FencedError::LeaseLost {
                name: fence.name.to_string(),
                token: fence.token.get(),
            });
        }
        match work(&txn).await {
            Ok(value) => {
                txn.commit().await.map_err(statement)?;
                Ok(value)
            }
            Err(err) => {
                txn.rollback().await.map_err(statement)?;
                Err(FencedError::Work(err))
            }
        }
    }
}
