//! Operators' controls, as the loop meets them: one poll of the store's control
//! version every [`poll interval`](crate::SchedulerBuilder::control_poll), and when
//! it moved, the resumes to catch up, the triggers to claim and the dynamic schedules
//! to add, change or drop. Pauses need nothing here: the take refuses them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Engine;
use crate::control::{ControlState, ScheduleRow, Trigger, TriggerId, TriggerState};
use crate::error::Error;
use crate::lease::{Holder, Lease, Tick};
use crate::policy::Overlap;
use crate::runtime::calls::{Gate, Retry};
use crate::runtime::dynamic::DynamicJob;
use crate::runtime::entries_for;
use crate::runtime::ticks::JobTicks;

/// The loop's side of the controls.
pub(super) struct ControlLoop {
    every: Duration,
    pub(super) next: Instant,
    gate: Gate,
    /// The control version last read; `None` before the first read.
    version: Option<i64>,
    /// Triggers of jobs this instance runs, not yet claimed or ended, as last read.
    waiting: Vec<Trigger>,
    /// Ended triggered runs whose end is still to be recorded.
    pub(super) to_finish: Vec<Finish>,
    /// The backoff of recording them after a failure.
    pub(super) finish_retry: Retry,
    /// The dynamic schedules running here, by name.
    dynamic: HashMap<String, Dynamic>,
    /// Entries of dynamic schedules since removed or changed.
    retired: HashSet<usize>,
    /// Whether this instance's handlers are registered with the store.
    registered: bool,
    /// Rows this instance cannot run, by name, with the version reported (logged
    /// once per version).
    reported: HashMap<String, i64>,
}

/// A dynamic schedule running here: its row's version and its entries.
struct Dynamic {
    version: i64,
    entries: Vec<usize>,
}

/// The end of a triggered run, to record before its lease is released: once the
/// lease has passed to another holder, an unfinished trigger may be claimed again.
pub(super) struct Finish {
    pub(super) id: TriggerId,
    pub(super) holder: Holder,
    pub(super) outcome: &'static str,
    pub(super) error: Option<String>,
    /// The run's release, queued once the end is recorded (`None`: the lease was
    /// lost).
    pub(super) release: Option<(crate::lease::LeaseKey, crate::lease::Release)>,
}

impl ControlLoop {
    pub(super) fn new(every: Duration, gate: Gate, retry: Retry) -> Self {
        Self {
            every,
            next: Instant::now(),
            gate,
            version: None,
            waiting: Vec::new(),
            to_finish: Vec::new(),
            finish_retry: retry,
            dynamic: HashMap::new(),
            retired: HashSet::new(),
            registered: false,
            reported: HashMap::new(),
        }
    }

    /// Whether entry `i` belongs to a dynamic schedule since removed or changed.
    pub(super) fn retired(&self, i: usize) -> bool {
        self.retired.contains(&i)
    }
}

impl Engine {
    /// Polls the controls when due, claims the triggers waiting, records the ends of
    /// triggered runs.
    pub(super) async fn controls_turn(&mut self) {
        let Some(ctl) = &self.ctl else {
            return;
        };
        if Instant::now() >= ctl.next {
            self.poll_controls().await;
            self.claim_triggers().await;
        }
        self.finish_triggers().await;
    }

    async fn poll_controls(&mut self) {
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        ctl.next = Instant::now() + ctl.every;
        let gate = ctl.gate.clone();
        if !ctl.registered && !self.s.handlers.is_empty() {
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
                Err(err) => {
                    warn!(error = %err, "registering the handlers of dynamic schedules failed; retrying at the next poll");
                    return;
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
        match gate.run("poll controls", call).await {
            Ok(None) => {}
            Ok(Some(state)) => self.apply_controls(state, since.is_none()),
            Err(err) => {
                warn!(error = %err, "polling the controls failed; retrying at the next poll")
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
        // The first read returns every resume ever made: start-up applied the
        // catch-up policy already.
        if !first {
            for resume in &state.resumed {
                if !resume.catch_up {
                    continue;
                }
                for i in self.entries_of(&resume.job) {
                    let e = &self.s.entries[i];
                    if resume.node.as_deref().is_some_and(|n| n != &*self.s.node) {
                        continue;
                    }
                    info!(job = %e.name, paused_since = %resume.paused_since,
                        "job resumed: catching up the ticks paused over, as its catch-up policy says");
                    self.jobs[i].on_resumed(&e.cadence, resume.paused_since, now);
                }
            }
        }
        let waiting: Vec<Trigger> = state
            .triggers
            .into_iter()
            .filter(|t| t.node.as_deref().is_none_or(|n| n == &*self.s.node))
            .filter(|t| !self.entries_of(&t.job).is_empty())
            .filter(|t| !self.runs_trigger(t.id))
            .collect();
        if let Some(ctl) = &mut self.ctl {
            ctl.waiting = waiting;
        }
    }

    /// The live entries of job `job`, slot 0 first.
    fn entries_of(&self, job: &str) -> Vec<usize> {
        let ctl = self.ctl.as_ref();
        (0..self.s.entries.len())
            .filter(|&i| &*self.s.entries[i].name == job)
            .filter(|&i| !ctl.is_some_and(|c| c.retired(i)))
            .collect()
    }

    fn runs_trigger(&self, id: TriggerId) -> bool {
        self.jobs
            .iter()
            .any(|j| j.running().is_some_and(|r| r.trigger == Some(id)))
    }

    /// Claims each waiting trigger for an idle entry of its job; a trigger the
    /// job's lease refuses (the job runs, here or elsewhere) waits as the job's
    /// overlap policy says: skipped, or asked again at the next poll (a running
    /// run asked to stop first, for "cancel running").
    async fn claim_triggers(&mut self) {
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        let waiting = std::mem::take(&mut ctl.waiting);
        let gate = ctl.gate.clone();
        let mut keep = Vec::new();
        let now = self.db_now();
        let ttl = self.s.settings.ttl;
        for trigger in waiting {
            // Claimed elsewhere, and its lease cannot have expired yet.
            if let TriggerState::Running { started_at, .. } = &trigger.state
                && now < *started_at + TimeDelta::from_std(ttl.get()).unwrap_or(TimeDelta::MAX)
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
                Claim::Failed => keep.push(trigger),
                Claim::Refused => {
                    if matches!(trigger.state, TriggerState::Pending)
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
            ctl.waiting = keep;
        }
    }

    /// A pending trigger of entry `i`'s job whose lease is held: the job runs (here
    /// or elsewhere), or another instance just claimed the trigger.
    async fn trigger_refused(&mut self, i: usize, trigger: Trigger, keep: &mut Vec<Trigger>) {
        let e = &self.s.entries[i];
        match e.cadence.policy.overlap {
            Overlap::Skip => {
                let (store, id) = (self.s.store.clone(), trigger.id);
                let call = async move {
                    match store.controls() {
                        Some(c) => {
                            c.finish_trigger(
                                id,
                                None,
                                "skipped",
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
    fn start_triggered(&mut self, i: usize, lease: Lease, trigger: &Trigger) {
        let now = self.db_now();
        let holds_any = self.holds_any();
        let key = lease.key();
        if !self.jobs[i].on_manual(lease, trigger.id, now) {
            // A run began meanwhile: hand the lease back, interrupted, and ask again.
            self.to_release
                .push((key, crate::lease::Release::Interrupted));
            if let Some(ctl) = &mut self.ctl {
                ctl.waiting.push(trigger.clone());
            }
            return;
        }
        if !holds_any {
            self.next_renew = Instant::now() + self.s.settings.renew_every;
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
                    debug!(trigger = %f.id, outcome = f.outcome, recorded, "triggered run recorded");
                    self.to_release.extend(f.release);
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
                for i in old.entries {
                    ctl.retired.insert(i);
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
        let handler = self
            .s
            .handlers
            .get(&row.handler)
            .ok_or_else(|| Error::UnknownHandler {
                handler: row.handler.clone(),
                known: {
                    let mut known: Vec<&str> = self.s.handlers.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                },
            })?;
        let clash =
            self.s.entries.iter().enumerate().any(|(i, e)| {
                *e.name == row.name && !self.ctl.as_ref().is_some_and(|c| c.retired(i))
            });
        if clash {
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
