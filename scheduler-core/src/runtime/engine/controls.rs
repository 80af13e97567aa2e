//! Operators' controls, as the loop meets them: one poll of the store's control
//! version every [`poll interval`](crate::SchedulerBuilder::control_poll), and when
//! it moved, the resumes to catch up, the triggers to claim and the dynamic schedules
//! to add, change or drop. Pauses need nothing here: the take refuses them.
//!
//! A store that announces changes ([`Controls::watch`](crate::Controls::watch)) is
//! polled when one is announced instead, as long as its watch is live, the last poll
//! succeeded, the handlers are registered and no trigger of a job run here waits for
//! its lease (those are claimed again at each poll): then an idle instance sends no
//! control read between changes. Otherwise the timer applies.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Engine;
use crate::control::{ControlSignal, ControlState, ScheduleRow, Trigger, TriggerId, TriggerState};
use crate::error::Error;
use crate::job::Scope;
use crate::lease::{Holder, Lease, Tick};
use crate::outcome::Outcome;
use crate::policy::{CatchUp, Overlap};
use crate::runtime::BackfillOptions;
use crate::runtime::calls::{Gate, Retry};
use crate::runtime::dynamic::DynamicJob;
use crate::runtime::entries_for;
use crate::runtime::ticks::JobTicks;

/// How many dynamic schedule rows one turn of the loop applies at most.
const APPLY_CHUNK: usize = 2_000;

/// How long a pending trigger of a job whose overlap policy skips must keep finding
/// the job's lease held before it is recorded skipped. A run that just ended holds
/// its lease until its release goes out (within the release linger, 100 ms, on
/// whichever instance ran it): a trigger made in that moment found nothing running.
const SKIP_CONFIRM: Duration = Duration::from_secs(1);

/// The loop's side of the controls.
pub(super) struct ControlLoop {
    every: Duration,
    /// When the timer's next poll is due.
    next: Instant,
    gate: Gate,
    /// The store's announcements of changes, if it makes any.
    pub(super) watch: Option<watch::Receiver<ControlSignal>>,
    /// The watch's count of changes when the last successful poll began.
    seen: Option<u64>,
    /// Whether the last poll failed (or must be read again from scratch): the timer
    /// applies until one succeeds.
    failed: bool,
    /// The control version last read; `None` before the first read.
    version: Option<i64>,
    /// When the jobs started (store clock): the resumes before it are start-up's.
    pub(super) started: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether a poll was applied since start-up: a read from scratch after that
    /// (the store's version went back) catches up no resume.
    applied: bool,
    /// Triggers of jobs this instance runs, not yet claimed or ended, as last read.
    waiting: Vec<Trigger>,
    /// Ended triggered runs whose end is still to be recorded.
    pub(super) to_finish: Vec<Finish>,
    /// The backoff of recording them after a failure.
    pub(super) finish_retry: Retry,
    /// The dynamic schedules running here, by name.
    dynamic: HashMap<String, Dynamic>,
    /// The live entries of each job, by name (slot 0 first): what triggers,
    /// resumes and name clashes look up, without a scan of every entry.
    by_name: HashMap<Arc<str>, Vec<usize>>,
    /// Triggers this instance ran: never claimed again here, even when recording
    /// their end took longer than their lease (another instance may then take it
    /// over, as it would a vanished holder's).
    ran_here: HashSet<TriggerId>,
    /// Pending triggers refused under [`Overlap::Skip`], when first refused: recorded
    /// skipped once still refused [`SKIP_CONFIRM`] later.
    refused_at: HashMap<TriggerId, Instant>,
    /// Whether this instance's handlers are registered with the store.
    registered: bool,
    /// Dynamic schedule rows read and not yet applied, oldest first.
    pub(super) rows: std::collections::VecDeque<ScheduleRow>,
    /// Catch-ups of ticks paused over ([`CatchUp::All`]) under way.
    catch_ups: Vec<tokio::task::JoinHandle<()>>,
    /// Rows this instance cannot run, by name, with the version reported (logged
    /// once per version).
    reported: HashMap<String, i64>,
}

/// A dynamic schedule running here: its row's version and its entries.
struct Dynamic {
    version: i64,
    entries: Vec<usize>,
}

/// The end of a triggered run, to record: [`Controls::finish_trigger`] also hands
/// the run's lease back in the same statement, restoring the job's row as it was
/// before the claim (a scheduled tick's completion untouched).
///
/// [`Controls::finish_trigger`]: crate::Controls::finish_trigger
pub(super) struct Finish {
    pub(super) id: TriggerId,
    /// The run's lease, still renewed until the end is recorded: were it to expire
    /// meanwhile, another instance could claim the trigger again.
    pub(super) lease: crate::lease::LeaseName,
    pub(super) holder: Holder,
    pub(super) outcome: Outcome,
    pub(super) error: Option<String>,
}

impl ControlLoop {
    pub(super) fn new(
        every: Duration,
        gate: Gate,
        retry: Retry,
        entries: &[crate::runtime::Entry],
        no_handlers: bool,
    ) -> Self {
        let mut by_name: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            by_name.entry(Arc::clone(&e.name)).or_default().push(i);
        }
        Self {
            by_name,
            ran_here: HashSet::new(),
            refused_at: HashMap::new(),
            rows: std::collections::VecDeque::new(),
            catch_ups: Vec::new(),
            every,
            next: Instant::now(),
            gate,
            watch: None,
            seen: None,
            failed: false,
            version: None,
            started: None,
            applied: false,
            waiting: Vec::new(),
            to_finish: Vec::new(),
            finish_retry: retry,
            dynamic: HashMap::new(),
            // Nothing to register: as good as registered.
            registered: no_handlers,
            reported: HashMap::new(),
        }
    }

    /// When the next poll is due: at once when the store announced a change since
    /// the last poll began, never while its live watch announced none (and nothing
    /// else needs a poll), else at the timer's next poll.
    pub(super) fn poll_at(&self) -> Option<Instant> {
        let quiet = !self.failed && self.registered && self.waiting.is_empty();
        // A watch whose store dropped it announces nothing more, live or not.
        let signal = self.watch.as_ref().filter(|w| w.has_changed().is_ok());
        match signal.map(|w| *w.borrow()) {
            Some(signal) if signal.live && quiet => {
                (self.seen != Some(signal.changes)).then(Instant::now)
            }
            _ => Some(self.next),
        }
    }
}

impl Engine {
    /// Polls the controls when due, claims the triggers waiting, records the ends of
    /// triggered runs.
    pub(super) async fn controls_turn(&mut self) {
        let Some(ctl) = &self.ctl else {
            return;
        };
        // A poll that failed (the controls table does not answer) claims nothing:
        // the loop waits on the store once per poll at most.
        if !ctl.rows.is_empty() {
            self.apply_some_schedules();
        } else if ctl.poll_at().is_some_and(|at| Instant::now() >= at) && self.poll_controls().await
        {
            self.claim_triggers().await;
        }
        self.finish_triggers().await;
    }

    /// Polls the controls; `false` when the poll failed.
    async fn poll_controls(&mut self) -> bool {
        let Some(ctl) = &mut self.ctl else {
            return false;
        };
        ctl.next = Instant::now() + ctl.every;
        // Announced from here on: seen by this poll, or moving the count again.
        let changes = ctl.watch.as_mut().map(|w| w.borrow_and_update().changes);
        let gate = ctl.gate.clone();
        if !ctl.registered {
            let mut names: Vec<String> = self.s.handlers.keys().cloned().collect();
            names.sort();
            let (store, node) = (self.s.store.clone(), self.s.node.to_string());
            let call = async move {
                match store.controls() {
                    Some(c) => c.register_handlers(&node, &names).await,
                    None => Ok(()),
                }
            };
            match gate.run("register handlers", call).await {
                Ok(()) => ctl.registered = true,
                // Polled all the same: resumes, triggers and schedules go on.
                Err(err) => {
                    warn!(error = %err, "registering the handlers of dynamic schedules failed; retrying at the next poll");
                }
            }
        }
        let since = ctl.version;
        let store = self.s.store.clone();
        let call = async move {
            match store.controls() {
                Some(c) => c.poll(since).await,
                None => Ok(None),
            }
        };
        let polled = gate.run("poll controls", call).await;
        if let Some(ctl) = &mut self.ctl {
            ctl.failed = polled.is_err();
            if polled.is_ok() {
                ctl.seen = changes;
            }
        }
        match polled {
            Ok(None) => true,
            // The store's version went back (a restore, a recreated table): read
            // everything again at the next poll.
            Ok(Some(state)) if since.is_some_and(|v| state.version < v) => {
                warn!(version = state.version, was = ?since,
                    "the store's control version went back; reading every control again");
                if let Some(ctl) = &mut self.ctl {
                    ctl.version = None;
                    ctl.next = Instant::now();
                    ctl.failed = true;
                }
                false
            }
            Ok(Some(state)) => {
                self.apply_controls(state, since.is_none());
                true
            }
            Err(err) => {
                warn!(error = %err, "polling the controls failed; retrying at the next poll");
                false
            }
        }
    }

    /// What changed since the last poll (everything, on the first).
    fn apply_controls(&mut self, state: ControlState, first: bool) {
        let now = self.db_now();
        if let Some(ctl) = &mut self.ctl {
            ctl.version = Some(state.version);
        }
        self.apply_schedules(state.schedules);
        // The first read returns every resume ever made. Start-up applied the
        // catch-up policy to those before it, except that under `CatchUp::All` it
        // left the ticks a pause ended by a catch-up covered to that catch-up (which
        // may never have run: every instance was down), within its window; a job
        // paused at start-up had its ticks refused, and one resumed since is caught
        // up here.
        let started = self.ctl.as_ref().and_then(|c| c.started);
        let initial = self
            .ctl
            .as_mut()
            .is_some_and(|c| !std::mem::replace(&mut c.applied, true));
        for resume in &state.resumed {
            if !resume.catch_up {
                continue;
            }
            if resume.node.as_deref().is_some_and(|n| n != &*self.s.node) {
                continue;
            }
            let entries = self.entries_of(&resume.job);
            let all = entries.first().and_then(|&slot0| {
                match self.s.entries[slot0].job_policy.catch_up {
                    CatchUp::All { max } => Some((slot0, max)),
                    _ => None,
                }
            });
            let since_start = match all {
                Some((slot0, _)) => self.jobs[slot0].catch_up_from(),
                None => started,
            };
            if first && (!initial || since_start.is_none_or(|at| resume.resumed_at < at)) {
                continue;
            }
            // Every tick paused over (the most recent `max`): run like a
            // backfill, each under a lease of its own, so a later tick that ran
            // meanwhile does not shut them out.
            if let Some((slot0, max)) = all {
                // A pause on one node kept only this node from taking a cluster
                // job: the rest of the cluster ran its ticks meanwhile, and a
                // backfill's leases of their own would run them again.
                if resume.node.is_some() && self.s.entries[slot0].scope == Scope::Cluster {
                    continue;
                }
                // Each slot's share of the ticks: start-up keeps `max` of each.
                let slots = u32::try_from(entries.len()).unwrap_or(u32::MAX);
                let keep = max.saturating_mul(slots);
                self.catch_up_all(slot0, resume.paused_since, resume.resumed_at, keep);
                continue;
            }
            for i in entries {
                let e = &self.s.entries[i];
                info!(job = %e.name, paused_since = %resume.paused_since,
                        "job resumed: catching up the ticks paused over, as its catch-up policy says");
                self.jobs[i].on_resumed(&e.cadence, resume.paused_since, now);
            }
        }
        let waiting: Vec<Trigger> = state
            .triggers
            .into_iter()
            .filter(|t| t.node.as_deref().is_none_or(|n| n == &*self.s.node))
            // While rows are still being applied, a trigger of a dynamic schedule
            // not applied yet is kept (claimed once its entries exist).
            .filter(|t| {
                !self.entries_of(&t.job).is_empty()
                    || self.ctl.as_ref().is_some_and(|c| !c.rows.is_empty())
            })
            .filter(|t| !self.runs_trigger(t))
            .collect();
        if let Some(ctl) = &mut self.ctl {
            ctl.waiting = waiting;
        }
    }

    /// Catches up the most recent `max` ticks of entry `i`'s job from `since` to
    /// `until` (a pause under [`CatchUp::All`]) as a backfill on a task of its own:
    /// each tick under a lease of its own, once across the instances that all start
    /// it, one at a time; counted `backfilled`.
    fn catch_up_all(
        &mut self,
        i: usize,
        since: chrono::DateTime<chrono::Utc>,
        until: chrono::DateTime<chrono::Utc>,
        max: u32,
    ) {
        let e = &self.s.entries[i];
        // As many as start-up may have left to it (`max` a slot), not capped lower.
        let keep = usize::try_from(max).unwrap_or(usize::MAX);
        let ticks = e.schedule.latest_ticks(since, until, keep);
        let (Some(from), Some(to)) = (ticks.front(), ticks.back()) else {
            return;
        };
        let (from, to, job) = (from.at(), to.at(), e.name.to_string());
        info!(job = %job, paused_since = %since, ticks = ticks.len(),
            "job resumed: catching up every tick paused over, each under a lease of its own");
        let backfiller = self.s.backfiller_of(i);
        let options = BackfillOptions::default()
            .concurrency(1)
            .max_ticks(ticks.len().max(1));
        let task = tokio::spawn(async move {
            match backfiller.backfill(&job, from, to, options).await {
                Ok(report) => {
                    info!(job = %job, ran = report.ran, already_done = report.already_done,
                    failed = report.failed, paused_again = report.paused, "ticks paused over caught up")
                }
                Err(err) => {
                    warn!(job = %job, error = %err, "catching up the ticks paused over failed")
                }
            }
        });
        if let Some(ctl) = &mut self.ctl {
            ctl.catch_ups.retain(|t| !t.is_finished());
            ctl.catch_ups.push(task);
        }
    }

    /// Stops the catch-ups under way (at shutdown): their ticks' leases expire and
    /// another instance's catch-up, or the next, takes them.
    pub(super) fn abort_catch_ups(&mut self) {
        if let Some(ctl) = &mut self.ctl {
            for task in ctl.catch_ups.drain(..) {
                task.abort();
            }
        }
    }

    /// The live entries of job `job`, slot 0 first.
    fn entries_of(&self, job: &str) -> Vec<usize> {
        self.ctl
            .as_ref()
            .and_then(|c| c.by_name.get(job))
            .cloned()
            .unwrap_or_default()
    }

    /// Whether this instance runs (or ran) trigger `t`.
    fn runs_trigger(&self, t: &Trigger) -> bool {
        self.ctl
            .as_ref()
            .is_some_and(|c| c.ran_here.contains(&t.id))
            || self.entries_of(&t.job).into_iter().any(|i| {
                self.jobs[i]
                    .running()
                    .is_some_and(|r| r.trigger == Some(t.id))
            })
    }

    /// Claims each waiting trigger for an idle entry of its job; a trigger the
    /// job's lease refuses (the job runs, here or elsewhere) waits as the job's
    /// overlap policy says: skipped, or asked again at the next poll (a running
    /// run asked to stop first, for "cancel running").
    async fn claim_triggers(&mut self) {
        // A run of this instance that ended holds its lease until its release goes
        // out: sent first (unless releases are backing off after a failure), so
        // that a trigger made meanwhile finds the lease free.
        let pending = self.ctl.as_ref().is_some_and(|c| {
            c.waiting
                .iter()
                .any(|t| matches!(t.state, TriggerState::Pending))
        });
        if pending && self.releases_due(true) {
            self.flush_releases().await;
        }
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        let waiting = std::mem::take(&mut ctl.waiting);
        let gate = ctl.gate.clone();
        let mut keep = Vec::new();
        let now = self.db_now();
        let ttl = self.s.settings.ttl;
        let mut waiting = waiting.into_iter();
        while let Some(trigger) = waiting.next() {
            // Claimed elsewhere, and its lease cannot have expired yet.
            if let TriggerState::Running { started_at, .. } = &trigger.state
                && started_at
                    .checked_add_signed(TimeDelta::from_std(ttl.get()).unwrap_or(TimeDelta::MAX))
                    .is_none_or(|expires| now < expires)
            {
                keep.push(trigger);
                continue;
            }
            let entries = self.entries_of(&trigger.job);
            let mut outcome = Claim::Refused;
            for &i in &entries {
                if self.jobs[i].running().is_some() {
                    continue;
                }
                let holder = Holder::generate_on(&self.s.holder_prefix);
                let (store, lease, id) = (
                    self.s.store.clone(),
                    self.s.entries[i].lease.clone(),
                    trigger.id,
                );
                let call = async move {
                    match store.controls() {
                        Some(c) => c.claim_trigger(id, &lease, &holder, ttl).await,
                        None => Err(Error::NoControls),
                    }
                };
                match gate.run("claim trigger", call).await {
                    Ok(Some(lease)) => {
                        outcome = Claim::Won(i, lease);
                        break;
                    }
                    Ok(None) => {}
                    Err(err) => {
                        warn!(trigger = %trigger.id, job = %trigger.job, error = %err,
                            "claiming a triggered run failed; retrying at the next poll");
                        outcome = Claim::Failed;
                        break;
                    }
                }
            }
            match outcome {
                Claim::Won(i, lease) => self.start_triggered(i, lease, &trigger),
                // The store fails: the rest wait for the next poll too, so a
                // failing controls table holds the loop up once per poll at most.
                Claim::Failed => {
                    keep.push(trigger);
                    keep.extend(waiting.by_ref());
                    break;
                }
                Claim::Refused => {
                    // A node-scoped job's trigger that names no node may run on
                    // any node: one node's busy lease does not decide it.
                    let any_node = trigger.node.is_none()
                        && entries
                            .first()
                            .is_some_and(|&i| self.s.entries[i].scope == crate::job::Scope::Node);
                    if matches!(trigger.state, TriggerState::Pending)
                        && !any_node
                        && let Some(&first) = entries.first()
                    {
                        self.trigger_refused(first, trigger, &mut keep).await;
                    } else {
                        keep.push(trigger);
                    }
                }
            }
        }
        if let Some(ctl) = &mut self.ctl {
            let still: HashSet<TriggerId> = keep.iter().map(|t| t.id).collect();
            ctl.refused_at.retain(|id, _| still.contains(id));
            ctl.waiting = keep;
        }
    }

    /// A pending trigger of entry `i`'s job whose lease is held: the job runs (here
    /// or elsewhere), or another instance just claimed the trigger.
    async fn trigger_refused(&mut self, i: usize, trigger: Trigger, keep: &mut Vec<Trigger>) {
        let e = &self.s.entries[i];
        // The job's policy: a slot of a concurrent job has `Skip` of its own.
        match e.job_policy.overlap {
            Overlap::Skip => {
                // First refused now, or not long ago: asked again a moment later,
                // in case the lease is held by a run that just ended.
                let Some(ctl) = &mut self.ctl else {
                    return;
                };
                let now = Instant::now();
                let first = *ctl.refused_at.entry(trigger.id).or_insert(now);
                if now < first + SKIP_CONFIRM {
                    ctl.next = ctl.next.min(first + SKIP_CONFIRM);
                    keep.push(trigger);
                    return;
                }
                let (store, id) = (self.s.store.clone(), trigger.id);
                let call = async move {
                    match store.controls() {
                        Some(c) => {
                            c.finish_trigger(
                                id,
                                None,
                                Outcome::Skipped,
                                Some("the job was running; its overlap policy skips a run asked for meanwhile"),
                            )
                            .await
                        }
                        None => Ok(false),
                    }
                };
                let Some(gate) = self.ctl.as_ref().map(|c| c.gate.clone()) else {
                    return;
                };
                match gate.run("finish trigger", call).await {
                    Ok(true) => info!(job = %e.name, trigger = %trigger.id,
                        "triggered run skipped: the job was running (overlap policy skip)"),
                    // Claimed elsewhere meanwhile: nothing to do.
                    Ok(false) => {}
                    Err(err) => {
                        warn!(trigger = %trigger.id, error = %err, "recording a skipped trigger failed; retrying");
                        keep.push(trigger);
                    }
                }
            }
            Overlap::CancelRunning => {
                // Asks whoever runs the job to stop, for the trigger's instant (here:
                // the run completes its tick however it ends, as for a newer tick);
                // the trigger is claimed once the lease is free.
                if self.jobs[i].running().is_some_and(|r| r.trigger.is_none())
                    && let Some(r) = self.jobs[i].on_cancel_requested()
                {
                    info!(job = %e.name, tick = %r.lease.tick, trigger = %trigger.id,
                        "run cancelled: a triggered run asked for the lease (overlap policy cancel running)");
                }
                self.to_cancel
                    .push((e.lease.clone(), Tick::new(trigger.requested_at)));
                keep.push(trigger);
            }
            // Buffered (or run beside, once a slot frees): asked again at the next
            // poll.
            _ => keep.push(trigger),
        }
    }

    /// Starts the run of `trigger` under `lease`, on entry `i`.
    fn start_triggered(&mut self, i: usize, mut lease: Lease, trigger: &Trigger) {
        let now = self.db_now();
        let holds_any = self.holds_any();
        let key = lease.key();
        // The run's tick is the trigger's own instant; the lease row keeps the
        // job's scheduled tick, untouched.
        lease.tick = Tick::new(trigger.requested_at);
        if !self.jobs[i].on_manual(lease, trigger.id, now) {
            // A run began meanwhile (cannot happen: claims are only made for idle
            // entries); hand the lease back as it was, interrupted, and leave the
            // trigger to be claimed again once its lease expires.
            warn!(trigger = %trigger.id, "a triggered run found its job running here; handing its lease back");
            self.to_release
                .push((key, crate::lease::Release::Interrupted));
            return;
        }
        if !holds_any {
            self.next_renew = Instant::now() + self.s.settings.renew_every;
        }
        if let Some(ctl) = &mut self.ctl {
            ctl.ran_here.insert(trigger.id);
        }
        let e = &self.s.entries[i];
        info!(job = %e.name, trigger = %trigger.id, by = %trigger.by, why = %trigger.why,
            "triggered run starting");
        self.s.observe.started(&e.name, Duration::ZERO);
        self.spawn_attempt(i, Duration::ZERO, Duration::ZERO);
    }

    /// Records the ends of triggered runs (kept for the next turn if the store
    /// fails).
    pub(super) async fn finish_triggers(&mut self) {
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        if ctl.to_finish.is_empty() || !ctl.finish_retry.ready() {
            return;
        }
        let gate = ctl.gate.clone();
        let finishes = std::mem::take(&mut ctl.to_finish);
        let mut failed = Vec::new();
        for f in finishes {
            let store = self.s.store.clone();
            let (id, holder, outcome, error) = (f.id, f.holder.clone(), f.outcome, f.error.clone());
            let call = async move {
                match store.controls() {
                    Some(c) => {
                        c.finish_trigger(id, Some(&holder), outcome, error.as_deref())
                            .await
                    }
                    None => Ok(false),
                }
            };
            match gate.run("finish trigger", call).await {
                Ok(recorded) => {
                    debug!(trigger = %f.id, outcome = %f.outcome, recorded,
                        "triggered run recorded, its lease handed back");
                }
                Err(err) => {
                    warn!(trigger = %f.id, error = %err, "recording the end of a triggered run failed; retrying");
                    failed.push(f);
                }
            }
        }
        let cap = self.s.settings.retry_cap;
        if let Some(ctl) = &mut self.ctl {
            if failed.is_empty() {
                ctl.finish_retry.ok();
            } else {
                ctl.finish_retry.failed(cap);
            }
            ctl.to_finish.extend(failed);
        }
    }

    /// Adds, changes and drops dynamic schedules as their rows say.
    fn apply_schedules(&mut self, rows: Vec<ScheduleRow>) {
        if let Some(ctl) = &mut self.ctl {
            ctl.rows.extend(rows);
        }
        self.apply_some_schedules();
    }

    /// Applies up to [`APPLY_CHUNK`] of the rows read and not yet applied: a first
    /// poll of 100,000 rows is applied over many turns of the loop, which renews,
    /// takes and releases in between.
    pub(super) fn apply_some_schedules(&mut self) {
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        let take = ctl.rows.len().min(APPLY_CHUNK);
        let rows: Vec<ScheduleRow> = ctl.rows.drain(..take).collect();
        let now = self.db_now();
        for row in rows {
            let Some(ctl) = &mut self.ctl else {
                return;
            };
            if let Some(d) = ctl.dynamic.get(&row.name)
                && d.version == row.version
                && !row.removed
                && row.enabled
            {
                continue;
            }
            // Drop what runs of the old row: a run under way ends as it would.
            if let Some(old) = ctl.dynamic.remove(&row.name) {
                ctl.by_name.remove(row.name.as_str());
                for i in old.entries {
                    let mut events = Vec::new();
                    self.jobs[i].retire(&mut events);
                    super::report(
                        &self.s,
                        &mut self.to_release,
                        &mut self.to_cancel,
                        i,
                        &mut events,
                    );
                }
                info!(schedule = %row.name, "dynamic schedule dropped or changed");
            }
            if row.removed || !row.enabled {
                continue;
            }
            match self.dynamic_entries(&row, now) {
                Ok(entries) => {
                    let first = self.s.entries.len();
                    let count = entries.len();
                    for entry in entries {
                        let mut ticks = JobTicks::default();
                        ticks.start_after(&entry.cadence, row.updated_at, now);
                        self.jobs.push(ticks);
                        self.s.entries.push(entry);
                    }
                    self.s.stats.track(&row.name);
                    info!(schedule = %row.name, handler = %row.handler, every = %row.schedule,
                        "dynamic schedule running");
                    if let Some(ctl) = &mut self.ctl {
                        ctl.reported.remove(&row.name);
                        let name: Arc<str> = row.name.as_str().into();
                        ctl.by_name.insert(name, (first..first + count).collect());
                        ctl.dynamic.insert(
                            row.name.clone(),
                            Dynamic {
                                version: row.version,
                                entries: (first..first + count).collect(),
                            },
                        );
                    }
                }
                Err(err) => {
                    let Some(ctl) = &mut self.ctl else {
                        return;
                    };
                    if ctl.reported.insert(row.name.clone(), row.version) != Some(row.version) {
                        warn!(schedule = %row.name, handler = %row.handler, error = %err,
                            "dynamic schedule not run on this instance");
                    }
                }
            }
        }
    }

    /// The entries of a dynamic schedule's row, or why this instance cannot run it.
    fn dynamic_entries(
        &self,
        row: &ScheduleRow,
        now: chrono::DateTime<chrono::Utc>,
    ) -> crate::Result<Vec<crate::runtime::Entry>> {
        let Some(handler) = self.s.handlers.get(&row.handler) else {
            let mut known: Vec<&str> = self.s.handlers.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Err(Error::InvalidControl {
                reason: format!(
                    "this instance has no handler named {:?} (its handlers: {}); the schedule runs on instances that registered it",
                    row.handler,
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            });
        };
        // The row's own old entries were dropped before: a name still live here is
        // a job registered in code.
        if !self.entries_of(&row.name).is_empty() {
            return Err(Error::InvalidControl {
                reason: format!(
                    "a job named {:?} is registered in code; a dynamic schedule cannot share its name",
                    row.name
                ),
            });
        }
        let job = DynamicJob::new(row, Arc::clone(&handler.1))?;
        let policy = job.policy_of();
        entries_for(
            Arc::new(job),
            policy,
            &self.s.node,
            &self.s.holder_prefix,
            now,
        )
    }
}

/// What claiming a trigger came to.
enum Claim {
    Won(usize, Lease),
    Refused,
    Failed,
}
