//! The run tasks: one set, shared by the loop and the starters that spawn a tick's
//! runs at its instant.
//!
//! A round of takes is answered ahead of its ticks. Its runs used to be spawned at
//! once, each task waiting on a timer of its own (and on its token) until its
//! instant: at 10,000 runs a tick, those timers and the extra poll of each task were
//! a sixth of the loop's CPU. Now a starter (a task per [`STARTER_SPAN`] of
//! instants) sleeps until the first and spawns the runs then, each polled once,
//! straight into its job. The starter is not the loop: a loop held up by a slow
//! store call would hold up the runs (that is why they had timers of their own).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

use tokio::sync::watch;
use tokio::task::{AbortHandle, Id, JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, warn};

use super::{RunResult, Slot};
use crate::job::{Idempotent, JobContext};

/// How many runs a starter spawns before it lets them run (and the loop have the
/// set: on a runtime of several threads it may be waiting for it meanwhile).
const SPAWN_CHUNK: usize = 256;

/// The instants one starter spawns the runs of: ticks of one instant share one, and
/// jittered ticks are spread over fewer starters than runs.
const STARTER_SPAN: std::time::Duration = std::time::Duration::from_millis(10);

/// The run tasks of the loop, and the runs handed to starters not yet spawned.
pub(super) struct Tasks {
    shared: Arc<Mutex<Shared>>,
    /// The starters: aborted with the loop.
    starters: JoinSet<()>,
    /// Cancelled: every starter spawns its runs now (the shutdown's end).
    hurry: CancellationToken,
}

#[derive(Default)]
struct Shared {
    set: JoinSet<RunResult>,
    by_task: ByTask,
    /// Runs the starters hold, not yet spawned.
    unspawned: usize,
    /// The loop, waiting on an empty set for runs the starters hold.
    waiting: Option<Waker>,
}

impl Shared {
    fn spawn(&mut self, run: Prepared, slot: Slot) -> AbortHandle {
        let task = run.spawn(&mut self.set);
        self.by_task.insert(task.id(), slot);
        task
    }
}

impl Tasks {
    pub(super) fn new() -> Self {
        Self {
            shared: Arc::default(),
            starters: JoinSet::new(),
            hurry: CancellationToken::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }

    /// Spawns `run` now, reported as `slot`. Returns the task's handle.
    pub(super) fn spawn(&mut self, run: Prepared, slot: Slot) -> AbortHandle {
        self.lock().spawn(run, slot)
    }

    /// Spawns the runs of `batch`: those whose instant has come now, the others by a
    /// starter per [`STARTER_SPAN`] of instants, at the first. A run of a later
    /// instant in that span (a jittered tick) waits for it in its own task.
    pub(super) fn spawn_batch(&mut self, batch: Batch) {
        if batch.runs.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut later: BTreeMap<u128, (Instant, Vec<(Slot, Prepared)>)> = BTreeMap::new();
        {
            let mut shared = self.lock();
            for (slot, run) in batch.runs {
                let at = run.begin_at;
                if at <= now {
                    shared.spawn(run, slot);
                    continue;
                }
                shared.unspawned += 1;
                let span = (at - now).as_nanos() / STARTER_SPAN.as_nanos();
                let (first, runs) = later.entry(span).or_insert_with(|| (at, Vec::new()));
                *first = (*first).min(at);
                runs.push((slot, run));
            }
        }
        for (_, (at, runs)) in later {
            let (shared, hurry) = (self.shared.clone(), self.hurry.clone());
            self.starters.spawn(async move {
                tokio::select! {
                    biased;
                    () = hurry.cancelled() => {}
                    () = tokio::time::sleep_until(at) => {}
                }
                start(&shared, runs).await;
            });
        }
        // Starters that are done.
        while self.starters.try_join_next().is_some() {}
    }

    /// Has every starter spawn its runs now (their tokens say whether they begin).
    pub(super) fn hurry(&self) {
        self.hurry.cancel();
    }

    /// No run task, and none to spawn.
    pub(super) fn is_empty(&self) -> bool {
        let shared = self.lock();
        shared.set.is_empty() && shared.unspawned == 0
    }

    /// How many runs there are, spawned or not.
    pub(super) fn len(&self) -> usize {
        let shared = self.lock();
        shared.set.len() + shared.unspawned
    }

    /// What task `id` was spawned for (once: its entry goes).
    pub(super) fn slot_of(&mut self, id: Id) -> Option<Slot> {
        self.lock().by_task.remove(&id)
    }

    /// A task that ended, if one did.
    pub(super) fn try_join_next(&mut self) -> Option<Result<(Id, RunResult), JoinError>> {
        self.lock().set.try_join_next_with_id()
    }

    /// The next task to end; `None` when there is none and none to spawn.
    pub(super) fn join_next(
        &mut self,
    ) -> impl Future<Output = Option<Result<(Id, RunResult), JoinError>>> + '_ {
        std::future::poll_fn(|cx| {
            let mut shared = self.lock();
            if shared.set.is_empty() {
                if shared.unspawned == 0 {
                    return Poll::Ready(None);
                }
                shared.waiting = Some(cx.waker().clone());
                return Poll::Pending;
            }
            shared.set.poll_join_next_with_id(cx)
        })
    }

    /// Aborts every task, and has the starters spawn theirs now.
    pub(super) fn abort_all(&mut self) {
        self.hurry();
        self.lock().set.abort_all();
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A starter's work at its instant: spawns `runs`, a chunk at a time, each chunk let
/// run before the next is spawned (spawning 10,000 before the first ran made the
/// first wait for the last), and wakes the loop if it waits for them.
async fn start(shared: &Mutex<Shared>, runs: Vec<(Slot, Prepared)>) {
    let mut runs = runs.into_iter().peekable();
    while runs.peek().is_some() {
        {
            let mut shared = lock(shared);
            for (slot, run) in runs.by_ref().take(SPAWN_CHUNK) {
                shared.spawn(run, slot);
                shared.unspawned -= 1;
            }
            if let Some(loop_waker) = shared.waiting.take() {
                loop_waker.wake();
            }
        }
        if runs.peek().is_some() {
            tokio::task::yield_now().await;
        }
    }
}

/// The loop's tasks by id, with the hash their ids need: a task id is a counter, so
/// one multiplication spreads it (SipHash, the default, showed in the loop's CPU at
/// 10,000 runs a second: an insert and a remove per run).
pub(super) type ByTask = HashMap<Id, Slot, BuildHasherDefault<TaskIdHasher>>;

/// Hashes a task id: the counter times a large odd constant (Fibonacci hashing).
#[derive(Default)]
pub(super) struct TaskIdHasher(u64);

impl Hasher for TaskIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// One attempt of a run, ready to spawn: `job` run with `ctx` from `begin_at`, under
/// `(timeout, grace)`, guarded by the lease's expiry when the job needs fencing.
pub(super) struct Prepared {
    /// What the task's result is reported under.
    pub(super) key: usize,
    pub(super) job: Arc<dyn Idempotent>,
    pub(super) ctx: JobContext,
    pub(super) begin_at: Instant,
    pub(super) limits: (Option<std::time::Duration>, std::time::Duration),
    /// A fenced run's guard.
    pub(super) watchdog: Option<Watchdog>,
    pub(super) span: tracing::Span,
}

impl Prepared {
    /// Spawns the attempt onto `tasks`. Returns the task's handle.
    pub(super) fn spawn(self, tasks: &mut JoinSet<RunResult>) -> AbortHandle {
        let Self {
            key,
            job,
            ctx,
            begin_at,
            limits: (timeout, grace),
            watchdog,
            span,
        } = self;
        let run = async move {
            let attempt = crate::runtime::run_attempt(job, ctx, begin_at, timeout, grace);
            let result = match watchdog {
                Some(watchdog) => watchdog.guard(attempt).await,
                None => attempt.await,
            };
            (key, result)
        };
        tasks.spawn(run.instrument(span))
    }
}

/// The runs a round's answer starts, spawned together once it is read (see
/// [`Tasks::spawn_batch`](super::tasks::Tasks::spawn_batch)); their instants are
/// counted from one local instant, so that the runs of one tick share theirs.
pub(super) struct Batch {
    pub(super) base: Instant,
    pub(super) runs: Vec<(Slot, Prepared)>,
}

impl Batch {
    pub(super) fn new() -> Self {
        Self {
            base: Instant::now(),
            runs: Vec::new(),
        }
    }
}

/// What a run of a job that needs fencing is guarded by: its lease's expiry as the
/// loop last said it, the attempt's token to cancel then, and the flag that says it
/// did ([`Running::expired`]).
pub(super) struct Watchdog {
    pub(super) expiry: watch::Receiver<Option<Instant>>,
    pub(super) cancel: CancellationToken,
    pub(super) expired: Arc<AtomicBool>,
}

impl Watchdog {
    /// Runs `attempt`, and cancels the run once the lease's expiry passes without a
    /// renewal: the run stops when another instance may take its tick, even while
    /// the loop is held up by a store call that does not answer. The attempt then
    /// ends as a cancelled attempt does.
    async fn guard<F: Future>(mut self, attempt: F) -> F::Output {
        let watch = async {
            loop {
                let at = *self.expiry.borrow_and_update();
                let expired = async {
                    match at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    () = expired => {
                        self.expired.store(true, Ordering::Relaxed);
                        self.cancel.cancel();
                        warn!("lease expired before it could be renewed: cancelling the run (the job needs fencing)");
                        return;
                    }
                    changed = self.expiry.changed() => {
                        // The loop no longer holds the run: it has nothing more to say.
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        };
        tokio::pin!(attempt);
        tokio::select! {
            biased;
            out = &mut attempt => out,
            () = watch => attempt.await,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    use chrono::DateTime;

    use super::*;
    use crate::error::BoxError;
    use crate::job::State;
    use crate::lease::{FencingToken, Holder, LeaseName, Tick};
    use crate::schedule::Schedule;

    /// Counts its runs' beginnings.
    struct Counted(Arc<AtomicU32>);

    #[async_trait::async_trait]
    impl Idempotent for Counted {
        fn name(&self) -> &str {
            "counted"
        }
        fn schedule(&self) -> Schedule {
            Schedule::every(Duration::from_secs(1))
        }
        async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    fn run(key: usize, begun: &Arc<AtomicU32>, begin_at: Instant) -> (Slot, Prepared) {
        let ctx = JobContext {
            job: Arc::from("counted"),
            tick: Tick::new(DateTime::UNIX_EPOCH),
            node: Arc::from("node-a"),
            lease: LeaseName::new("counted").unwrap(),
            holder: Holder::from_stored("node-a:1:0".to_owned()),
            token: FencingToken::new(1),
            cancel: CancellationToken::new(),
            state: State::default(),
            attempt: 1,
        };
        let job = Arc::new(Counted(begun.clone()));
        let limits = (None, Duration::from_secs(1));
        let span = tracing::Span::none();
        let run = Prepared {
            key,
            job,
            ctx,
            begin_at,
            limits,
            watchdog: None,
            span,
        };
        (Slot::Job(key), run)
    }

    /// The runs of a later instant begin at it with nobody looking at the tasks (a
    /// loop held up by a store call), and are then there to join; a run whose
    /// token was cancelled before its instant never begins.
    #[tokio::test(start_paused = true)]
    async fn a_batch_begins_at_its_instant_without_the_loop() {
        let begun = Arc::new(AtomicU32::new(0));
        let mut tasks = Tasks::new();
        let mut batch = Batch::new();
        let at = batch.base + Duration::from_secs(1);
        batch.runs.push(run(0, &begun, batch.base));
        for key in 1..=3 {
            batch.runs.push(run(key, &begun, at));
        }
        let (slot, cancelled) = run(4, &begun, at);
        cancelled.ctx.cancel.cancel();
        batch.runs.push((slot, cancelled));
        // Jittered: 6 ms after the others (their starter's), and 25 ms (its own).
        batch
            .runs
            .push(run(5, &begun, at + Duration::from_millis(6)));
        batch
            .runs
            .push(run(6, &begun, at + Duration::from_millis(25)));
        tasks.spawn_batch(batch);
        assert_eq!(tasks.len(), 7);
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(
            begun.load(Ordering::Relaxed),
            1,
            "only the run due now began"
        );
        tokio::time::sleep(Duration::from_millis(103)).await;
        assert_eq!(
            begun.load(Ordering::Relaxed),
            4,
            "the runs of 1 s began then"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(
            begun.load(Ordering::Relaxed),
            4,
            "none began before its instant"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(begun.load(Ordering::Relaxed), 5);
        tokio::time::sleep(Duration::from_millis(17)).await;
        assert_eq!(begun.load(Ordering::Relaxed), 5);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(begun.load(Ordering::Relaxed), 6);
        let mut ended = Vec::new();
        while let Some(done) = tasks.join_next().await {
            let (id, (key, result)) = done.unwrap();
            assert_eq!(tasks.slot_of(id), Some(Slot::Job(key)));
            ended.push((key, result.is_ok()));
        }
        ended.sort_unstable();
        assert_eq!(
            ended,
            [
                (0, true),
                (1, true),
                (2, true),
                (3, true),
                (4, false),
                (5, true),
                (6, true)
            ]
        );
        assert!(tasks.is_empty());
    }
}
