//! How the loop calls the store: through a [`Gate`] that keeps at most one call of a
//! kind in flight and never drops a statement mid-way, and with a [`Retry`] per
//! operation.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::warn;

use super::backoff::Backoff;
use super::observe::Observer;
use crate::error::{Error, StoreFailure};

/// How late past a call's deadline the loop must see it to know that its thread was
/// held up (not the store slow): far more than a busy machine delays a timer.
const HELD_UP: Duration = Duration::from_secs(1);

/// Store calls of one kind, at most one in flight: an instance never has more than
/// one connection of the app's pool busy with lease statements (and one with a clock
/// read), however long the store takes to answer.
#[derive(Debug, Clone)]
pub(super) struct Gate {
    permit: Arc<Semaphore>,
    /// How long the loop waits for an answer before it goes on without one.
    limit: Duration,
    /// Where each call's duration and result are reported.
    observe: Observer,
}

impl Gate {
    pub(super) fn new(limit: Duration, observe: Observer) -> Self {
        Self {
            permit: Arc::new(Semaphore::new(1)),
            limit,
            observe,
        }
    }

    /// Runs `call` on its own task holding the gate's permit. The loop waits up to
    /// the limit; a call that has not answered by then goes on (so the store's
    /// connection is returned when the server answers, not dropped mid-statement),
    /// still holding the permit, until [`Gate::hard_limit`] when it is dropped.
    pub(super) async fn run<T, Fut>(&self, operation: &'static str, call: Fut) -> crate::Result<T>
    where
        T: Send + 'static,
        Fut: Future<Output = crate::Result<T>> + Send + 'static,
    {
        self.run_within(operation, self.limit, call).await
    }

    /// As [`run`](Self::run), waiting up to `limit` instead of the gate's (and
    /// keeping the gate up to twice that).
    pub(super) async fn run_within<T, Fut>(
        &self,
        operation: &'static str,
        limit: Duration,
        call: Fut,
    ) -> crate::Result<T>
    where
        T: Send + 'static,
        Fut: Future<Output = crate::Result<T>> + Send + 'static,
    {
        let started = Instant::now();
        let permit = tokio::time::timeout(limit, self.permit.clone().acquire_owned())
            .await
            .ok()
            .and_then(Result::ok);
        let result = match permit {
            Some(permit) => {
                let wait = limit.saturating_sub(started.elapsed());
                self.spawn(operation, permit, call, wait, limit).await
            }
            None => Err(Error::store_as(
                StoreFailure::Unreachable,
                format!(
                    "an earlier store call has not answered yet; {operation} waited {limit:?} for it"
                ),
            )),
        };
        self.observe
            .store_call(operation, started.elapsed(), result.is_ok());
        result
    }

    /// The gate's own bound on a call.
    pub(super) fn limit(&self) -> Duration {
        self.limit
    }

    /// A gate of its own (its own permit) with the same bound: for calls of another
    /// kind, which one of this gate's kind in flight must not hold up.
    pub(super) fn sibling(&self) -> Self {
        Self::new(self.limit, self.observe.clone())
    }

    /// How long an unanswered call waited for up to `limit` may keep the gate: twice
    /// that, and at least 10 s, longer than a store's own server-side bound on a
    /// statement (the PostgreSQL store's default is 2 s), so a call held up by a lock
    /// ends on the server and returns its connection before another is sent. Only a
    /// call that gets no answer at all (a connection cut without a close) is dropped.
    fn hard_limit(limit: Duration) -> Duration {
        limit.saturating_mul(2).max(Duration::from_secs(10))
    }

    /// Runs `call` if no other call of this gate is in flight; `None` otherwise.
    pub(super) async fn try_run<T, Fut>(
        &self,
        operation: &'static str,
        call: Fut,
    ) -> Option<crate::Result<T>>
    where
        T: Send + 'static,
        Fut: Future<Output = crate::Result<T>> + Send + 'static,
    {
        let permit = self.permit.clone().try_acquire_owned().ok()?;
        let started = Instant::now();
        let result = self
            .spawn(operation, permit, call, self.limit, self.limit)
            .await;
        self.observe
            .store_call(operation, started.elapsed(), result.is_ok());
        Some(result)
    }

    async fn spawn<T, Fut>(
        &self,
        operation: &'static str,
        permit: OwnedSemaphorePermit,
        call: Fut,
        wait: Duration,
        limit: Duration,
    ) -> crate::Result<T>
    where
        T: Send + 'static,
        Fut: Future<Output = crate::Result<T>> + Send + 'static,
    {
        let hard = Self::hard_limit(limit);
        let mut task = tokio::spawn(async move {
            let _permit = permit;
            tokio::time::timeout(hard, call).await
        });
        let deadline = Instant::now() + wait;
        let mut answer = tokio::time::timeout(wait, &mut task).await;
        // A deadline seen seconds after it passed: this thread did not run meanwhile
        // (a job blocking it), so the call had no chance to read its answer either.
        // The store is not to blame: the call gets its time again.
        let held_up = Instant::now().saturating_duration_since(deadline);
        if answer.is_err() && held_up >= HELD_UP {
            answer = tokio::time::timeout(wait, &mut task).await;
            if answer.is_ok() {
                warn!(
                    held_up = ?held_up,
                    "the scheduler's thread was held up {held_up:?} while the store answered \
                     ({operation}): is a job blocking its thread (std::thread::sleep, blocking \
                     I/O, a long computation) instead of awaiting? Run such work in \
                     tokio::task::spawn_blocking"
                );
            }
        }
        match answer {
            Ok(Ok(Ok(result))) => result,
            Ok(Ok(Err(_))) | Err(_) if held_up >= HELD_UP => Err(Error::store_as(
                StoreFailure::Unreachable,
                format!(
                    "the store did not answer ({operation}) within {limit:?}, and the \
                     scheduler's thread was held up {held_up:?} meanwhile (a job blocking its \
                     thread?); the call was abandoned"
                ),
            )),
            Ok(Ok(Err(_))) | Err(_) => Err(Error::store_as(
                StoreFailure::Unreachable,
                format!(
                    "the store did not answer ({operation}) within {limit:?}; the call was abandoned"
                ),
            )),
            Ok(Err(join)) => Err(Error::store(format!("the store call failed: {join}"))),
        }
    }
}

/// A store operation's retry state.
#[derive(Debug)]
pub(super) struct Retry {
    backoff: Backoff,
    /// Not before this instant (after a failure).
    pub(super) at: Option<Instant>,
}

impl Retry {
    pub(super) fn new(base: Duration, cap: Duration) -> Self {
        Self {
            backoff: Backoff::new(base, cap),
            at: None,
        }
    }

    pub(super) fn ready(&self) -> bool {
        self.at.is_none_or(|at| Instant::now() >= at)
    }

    pub(super) fn ok(&mut self) {
        self.backoff.reset();
        self.at = None;
    }

    /// A failure: the delay before the next try, at most `cap`.
    pub(super) fn failed(&mut self, cap: Duration) -> Duration {
        let delay = self.backoff.next_delay().min(cap);
        self.at = Some(Instant::now() + delay);
        delay
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Blocks this (current-thread) runtime's only thread for `d` once polled, as a
    /// job calling `std::thread::sleep` does.
    fn block_thread(d: Duration) {
        tokio::spawn(async move { std::thread::sleep(d) });
    }

    fn gate() -> Gate {
        let observe = Observer::new(crate::Stats::default(), None, None);
        Gate::new(Duration::from_millis(200), observe)
    }

    /// A call the store answers in 50 ms, while a job blocks the thread for 2 s: it
    /// succeeds (it was abandoned, the store blamed: "did not answer within 200ms").
    #[tokio::test]
    async fn a_blocked_thread_does_not_abandon_a_call_the_store_answered() {
        block_thread(Duration::from_secs(2));
        let answer = gate()
            .run("poll controls", async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                // An answer is read in more than one step, as a driver's is.
                tokio::task::yield_now().await;
                Ok(5)
            })
            .await;
        assert_eq!(answer.map_err(|e| e.to_string()), Ok(5));
    }

    /// A call that gets no answer while the thread was blocked says both.
    #[tokio::test]
    async fn a_call_unanswered_across_a_blocked_thread_says_so() {
        block_thread(Duration::from_secs(2));
        let answer = gate()
            .run("poll controls", async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(5)
            })
            .await;
        let err = answer.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("a job blocking its thread?"), "{err}");
    }

    /// A call unanswered on a thread that ran blames the store, as before.
    #[tokio::test]
    async fn an_unanswered_call_on_a_free_thread_blames_the_store() {
        let answer = gate()
            .run("poll controls", async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(5)
            })
            .await;
        let err = answer.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.contains("the store did not answer (poll controls) within 200ms"),
            "{err}"
        );
        assert!(!err.contains("blocking"), "{err}");
    }
}
