//! The loop: start-up (the store's clock first), then turns until the shutdown,
//! woken by the clock, by runs that end, by backfills asked for and by the store's
//! announcements of control changes; then the drain. A backfill asked for while no
//! scheduler runs gets a loop of its own ([`Engine::standalone`]).

use std::collections::HashSet;
use std::future::Future;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Engine;
use super::backfills::{BackfillDoor, BackfillRequest};
use crate::error::{Error, StoreFailure};
use crate::lease::LeaseName;
use crate::runtime::backoff::Backoff;

impl Engine {
    pub(crate) async fn run(mut self, shutdown: impl Future<Output = ()>, door: BackfillDoor) {
        let mut shutdown = std::pin::pin!(shutdown);
        self.s.observe.declare(&self.s.declarations());
        info!(node = %self.s.node, jobs = self.s.entries.len(), ttl = ?self.s.settings.ttl.get(), "scheduler starting");
        // Backfills asked for meanwhile wait in the door for the first turn.
        let requests = door.open();
        // Learn the store's clock before computing any tick.
        let mut startup = Backoff::new(self.s.settings.retry_base, self.s.settings.retry_cap);
        let mut new_leases = None;
        let mut failure = StoreFailure::Unreachable;
        // Recording the leases is retried for a lease ttl; then the scheduler starts
        // without (a store that refuses it, a table altered by hand, must not keep
        // it from taking leases and saying why they fail).
        let record_until = Instant::now() + self.s.settings.ttl.get();
        loop {
            self.beat.beat();
            // The jobs new to the cluster first (their rows' tick is then no later
            // than the clock read next, so no tick after start-up is refused).
            if new_leases.is_none() {
                new_leases = match self.create_missing_leases().await {
                    Ok(created) => Some(created),
                    Err(err) if Instant::now() >= record_until => {
                        warn!(
                            error = %err,
                            "recording the jobs' leases failed; starting without: start-up \
                             catches up as each job's catch-up window says, even a job new \
                             to the cluster"
                        );
                        Some(HashSet::new())
                    }
                    Err(err) => {
                        failure = err.store_failure().unwrap_or(StoreFailure::Unreachable);
                        None
                    }
                };
            }
            if new_leases.is_some() && self.sync_clock().await {
                // The first read also paid for the connection's set-up; a second one
                // on the warm connection is kept if its round trip is shorter.
                self.sync_clock().await;
                break;
            }
            self.beat.store_failed(match new_leases {
                None => failure,
                Some(_) => StoreFailure::Unreachable,
            });
            let wait = startup.next_delay();
            let what = match new_leases {
                None => "recording the jobs' leases",
                Some(_) => "reading the store's clock",
            };
            warn!(retry_in = ?wait, "{what} failed; retrying");
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    door.close();
                    return;
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.store_ok();
        let now = self.db_now();
        let new_leases = new_leases.unwrap_or_default();
        for (job, e) in self.jobs.iter_mut().zip(&self.s.entries) {
            if new_leases.contains(&e.lease) {
                job.start_new(&e.cadence, now);
            } else {
                job.start(&e.cadence, now);
            }
        }
        if !new_leases.is_empty() {
            let names: Vec<&str> = new_leases.iter().map(LeaseName::as_str).collect();
            info!(leases = ?names, "new to the cluster: no tick from before now is caught up");
        }
        if let Some(ctl) = &mut self.ctl {
            ctl.started = Some(now);
        }
        self.turns(shutdown, Some(requests)).await;
        door.close();
        self.drain().await;
    }

    /// Creates the rows of the jobs' leases that have none
    /// ([`Store::create_missing`](crate::Store::create_missing)): the leases new to
    /// the cluster.
    async fn create_missing_leases(&mut self) -> crate::Result<HashSet<LeaseName>> {
        let names: Vec<LeaseName> = self.s.entries.iter().map(|e| e.lease.clone()).collect();
        if names.is_empty() {
            return Ok(HashSet::new());
        }
        let store = self.s.store.clone();
        let call = async move { store.create_missing(&names).await };
        match self.clock_gate.try_run("create leases", call).await {
            Some(Ok(created)) => Ok(created.into_iter().collect()),
            Some(Err(err)) => {
                debug!(error = %err, "recording the jobs' leases failed");
                Err(err)
            }
            None => Err(Error::store_as(
                StoreFailure::Unreachable,
                "an earlier store call has not answered yet",
            )),
        }
    }

    /// Runs backfill `request` on this loop, which has no job and ends with it (no
    /// scheduler loop runs to take it). A store that answers no call for a whole
    /// ttl ends the backfill (an error), as it would on the scheduler's loop.
    pub(crate) async fn standalone(mut self, request: BackfillRequest) {
        self.standalone = true;
        self.add_backfill(request);
        let mut startup = Backoff::new(self.s.settings.retry_base, self.s.settings.retry_cap);
        let failure = Error::store_as(
            StoreFailure::Unreachable,
            "reading the store's clock failed",
        );
        while !self.sync_clock().await {
            let wait = startup.next_delay();
            self.store_failed("reading the store's clock", &failure, wait);
            self.settle_backfills();
            if self.backfills.is_empty() {
                return;
            }
            tokio::time::sleep(wait).await;
        }
        self.store_ok();
        let never = std::pin::pin!(std::future::pending::<()>());
        self.turns(never, None).await;
        self.drain().await;
    }

    /// The loop's turns, until `shutdown` (or, on a backfill's own loop, until its
    /// last backfill is over).
    pub(super) async fn turns(
        &mut self,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
        mut requests: Option<tokio::sync::mpsc::UnboundedReceiver<BackfillRequest>>,
    ) {
        // The store's announcements of control changes: each wakes the loop, whose
        // turn polls when the control loop's own receiver says so.
        let mut announced = None;
        if let Some(ctl) = &mut self.ctl {
            ctl.watch = self.s.store.controls().and_then(|c| c.watch());
            announced = ctl.watch.clone();
        }
        'turns: loop {
            self.beat.beat();
            // The shutdown is heard during a turn too (a slow store's take may
            // keep a turn for up to two renewal periods): what the turn had not
            // learned yet (a take's answer) is left as a lost answer would be.
            tokio::select! {
                biased;
                () = &mut shutdown => break 'turns,
                () = self.turn() => {}
            }
            if self.standalone && self.backfills.is_empty() {
                break;
            }
            let mut wake = self.next_wake();
            // Runs that end before `wake` are handled without a whole turn (which
            // looks at every job: at 10,000 jobs a turn per few ended runs held up
            // the start of the runs still to begin at the same instant).
            loop {
                // Biased, so that a seeded simulation replays exactly; the shutdown
                // first, so that a loop always due (a store slow to answer) still
                // hears it.
                tokio::select! {
                    biased;
                    () = &mut shutdown => break 'turns,
                    () = tokio::time::sleep_until(wake) => break,
                    Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                        let mut ended = Vec::new();
                        ended.extend(self.finished(done));
                        while let Some(done) = self.tasks.try_join_next() {
                            ended.extend(self.finished(done));
                        }
                        self.beat.beat();
                        match self.wake_after_runs_ended(&ended, wake) {
                            Some(sooner) => wake = sooner,
                            None => break,
                        }
                    }
                    answer = async {
                        match self.backfill_take.as_mut() {
                            Some((_, call)) => call.await,
                            None => std::future::pending().await,
                        }
                    } => {
                        let answer = answer.unwrap_or_else(|join| {
                            Err(Error::store(format!("the take failed: {join}")))
                        });
                        self.on_backfill_take(answer);
                        break;
                    }
                    request = async {
                        match requests.as_mut() {
                            Some(rx) => rx.recv().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        match request {
                            Some(request) => self.add_backfill(request),
                            None => requests = None,
                        }
                        break;
                    }
                    // A control poll's answer (read off the loop), to apply.
                    () = async {
                        match self.ctl.as_mut() {
                            Some(ctl) => ctl.polls.next_answer().await,
                            None => std::future::pending().await,
                        }
                    } => break,
                    changed = async {
                        match announced.as_mut() {
                            Some(watch) => watch.changed().await.is_ok(),
                            None => std::future::pending().await,
                        }
                    } => {
                        // A store that dropped its watch announces nothing more:
                        // the timer applies (the control loop's receiver says so).
                        if !changed {
                            announced = None;
                        }
                        break;
                    }
                }
            }
        }
    }
}
