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
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::Engine;
use crate::control::{ControlSignal, ControlState, Resume, ScheduleRow, Trigger, TriggerId};
use crate::runtime::calls::{Gate, Retry};
use crate::runtime::decide::{ResumeAction, ResumedJob, on_resume};

mod beats;
mod polls;
mod schedules;
mod spread;
mod triggers;
mod window;

pub(super) use beats::Beats;

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
    pub(super) to_finish: Vec<super::Finish>,
    /// The backoff of recording them after a failure.
    pub(super) finish_retry: Retry,
    /// The dynamic schedules running here, by name.
    dynamic: HashMap<Arc<str>, Dynamic>,
    /// The live entries of each job, by name (slot 0 first; a job's entries are
    /// consecutive): what triggers, resumes and name clashes look up, without a scan
    /// of every entry. A range, not a list: a million dynamic schedules each have one.
    by_name: HashMap<Arc<str>, Range<usize>>,
    /// Triggers this instance ran: never claimed again here, even when recording
    /// their end took longer than their lease (another instance may then take it
    /// over, as it would a vanished holder's).
    ran_here: HashSet<TriggerId>,
    /// Pending triggers refused under [`Overlap::Skip`](crate::Overlap::Skip), when
    /// first refused: recorded skipped once still refused a moment later
    /// ([`on_trigger_refused`](crate::runtime::decide::on_trigger_refused)).
    refused_at: HashMap<TriggerId, Instant>,
    /// Whether this instance's jobs and handlers are registered with the store.
    registered: bool,
    /// The jobs registered in code, by name, sorted: registered with the store so
    /// that an operator's control of a job nobody runs can be refused.
    job_names: Vec<String>,
    /// Dynamic schedule rows read and not yet applied, oldest first.
    pub(super) rows: std::collections::VecDeque<ScheduleRow>,
    /// Rows loaded as they come due, if so.
    window: Option<window::Window>,
    /// Rows this instance cannot run, by name, with the version reported (logged
    /// once per version).
    reported: HashMap<String, i64>,
    /// This instance's heartbeat.
    pub(super) beats: Beats,
    /// The poll under way, off the loop.
    pub(super) polls: polls::Polls,
    /// The dynamic schedules' cron expressions, each compiled once while in use.
    pub(super) crons: crate::schedule::CronCache,
    /// This instance's place among the live instances that run each handler, as
    /// last read.
    share: spread::Share,
    /// The last pause of each job (everywhere, or on this node) that ended without
    /// catch-up, as read: a dynamic schedule's row started since catches up none of
    /// the ticks it dropped.
    dropped: HashMap<String, (DateTime<Utc>, DateTime<Utc>)>,
    /// While a poll is applied (`None` otherwise): the ticks the entries of
    /// dynamic schedules it replaced won, by name. A resume read in the same poll
    /// catches none of them up (the old entry may have run one paused over, taken
    /// after the resume and before this poll).
    relaid: Option<HashMap<Arc<str>, Vec<crate::lease::Tick>>>,
    /// Resumes with catch-up, everywhere or on this node, that the first poll read
    /// of jobs with no entries yet (a dynamic schedule's row not applied or not
    /// loaded yet), by job: each is applied once, when the row starts, as that poll
    /// would have. At most one per job and node, as the store keeps them.
    unresumed: HashMap<String, Vec<Resume>>,
}

/// A dynamic schedule running here: its row's version and its entries.
struct Dynamic {
    version: i64,
    entries: Range<usize>,
    /// The row's handler: its ticks are spread over the instances that run it.
    handler: Arc<str>,
    /// Whether its bound is moved forward from here ([`window::advances`]).
    cluster: bool,
    /// Its bound as the store was last told (or as read), when known.
    advanced: Option<DateTime<Utc>>,
    /// When its row last changed: a resume from before catches nothing up here.
    changed: Option<DateTime<Utc>>,
}

impl ControlLoop {
    /// The entries of the dynamic schedules running here, with their handler.
    fn dynamic_entries(&self) -> Vec<(usize, Arc<str>)> {
        self.dynamic
            .values()
            .flat_map(|d| d.entries.clone().map(|i| (i, Arc::clone(&d.handler))))
            .collect()
    }

    pub(super) fn new(
        every: Duration,
        gate: Gate,
        retry: Retry,
        entries: &[crate::runtime::Entry],
        no_handlers: bool,
        beats: Beats,
        // With rows loaded as they come due: their look-ahead, if set, how long a
        // freed entry waits before it is reused, and how many rows are held.
        when_due: Option<(Option<Duration>, Duration, usize)>,
    ) -> Self {
        let mut by_name: HashMap<Arc<str>, Range<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            let slots = by_name.entry(Arc::clone(&e.name)).or_insert(i..i);
            // `build()` lays a job's slots out one after the other.
            debug_assert_eq!(slots.end, i, "{} has entries apart", e.name);
            slots.end = i + 1;
        }
        let mut job_names: Vec<String> = by_name.keys().map(|name| name.to_string()).collect();
        job_names.sort();
        Self {
            by_name,
            ran_here: HashSet::new(),
            refused_at: HashMap::new(),
            rows: std::collections::VecDeque::new(),
            window: when_due.map(|(ahead, quarantine, held)| {
                window::Window::new(every, ahead, quarantine, held)
            }),
            dropped: HashMap::new(),
            relaid: None,
            unresumed: HashMap::new(),
            crons: crate::schedule::CronCache::default(),
            share: spread::Share::default(),
            every,
            next: Instant::now(),
            polls: polls::Polls::new(gate.sibling()),
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
            registered: no_handlers && job_names.is_empty(),
            job_names,
            reported: HashMap::new(),
            beats,
        }
    }

    /// When the next poll is due: at once when the store announced a change since
    /// the last poll began, never while its live watch announced none (and nothing
    /// else needs a poll), else at the timer's next poll.
    pub(super) fn poll_at(&self) -> Option<Instant> {
        // One poll at a time; its answer at once.
        if self.polls.answered() {
            return Some(Instant::now());
        }
        if self.polls.busy() {
            return None;
        }
        let quiet = !self.failed && self.registered && self.waiting.is_empty();
        // A watch whose store dropped it announces nothing more, live or not.
        let signal = self.watch.as_ref().filter(|w| w.has_changed().is_ok());
        match signal.map(|w| *w.borrow()) {
            Some(signal) if signal.live && quiet => {
                let announced = self.seen != Some(signal.changes);
                match &self.window {
                    // Rows loaded as they come due are read on the timer too.
                    Some(_) if !announced => Some(self.next),
                    _ => announced.then(Instant::now),
                }
            }
            _ => Some(self.next),
        }
    }
}

impl Engine {
    /// Applies the answer of the poll under way, if it came, and claims the triggers
    /// waiting: first in a turn, before its takes, as if the poll had been read then.
    pub(super) async fn poll_answered(&mut self) {
        if self.finish_poll() == Some(true) {
            self.claim_triggers().await;
        }
    }

    /// Starts a poll of the controls when due (its answer is applied at a later turn),
    /// records the heartbeat and the ends of triggered runs.
    pub(super) async fn controls_turn(&mut self) {
        let Some(ctl) = &self.ctl else {
            return;
        };
        // A poll that failed (the controls table does not answer) claims nothing:
        // the loop waits on the store once per poll at most.
        if !ctl.rows.is_empty() {
            self.apply_some_schedules();
        } else if !ctl.polls.busy() && ctl.poll_at().is_some_and(|at| Instant::now() >= at) {
            self.register().await;
            self.start_poll();
        }
        self.heartbeat_turn().await;
        self.finish_triggers(false).await;
    }

    /// Registers this instance's jobs and handlers, unless done; the timer's next
    /// poll from now.
    async fn register(&mut self) {
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        ctl.next = Instant::now() + ctl.every;
        let gate = ctl.gate.clone();
        if !ctl.registered {
            let mut names: Vec<String> = self.s.handlers.keys().cloned().collect();
            names.sort();
            let jobs = ctl.job_names.clone();
            let (store, node) = (self.s.store.clone(), self.s.node.to_string());
            let call = async move {
                let Some(c) = store.controls() else {
                    return Ok(());
                };
                if !names.is_empty() {
                    c.register_handlers(&node, &names).await?;
                }
                if !jobs.is_empty() {
                    c.register_jobs(&node, &jobs).await?;
                }
                Ok(())
            };
            match gate.run("register jobs and handlers", call).await {
                Ok(()) => ctl.registered = true,
                // Polled all the same: resumes, triggers and schedules go on.
                Err(err) => {
                    warn!(error = %err, "registering this instance's jobs and the handlers of dynamic schedules failed; retrying at the next poll");
                }
            }
        }
    }

    /// Applies a poll's answer (read from version `since`); `false` when the poll
    /// failed.
    fn on_polled(
        &mut self,
        polled: crate::Result<Option<ControlState>>,
        since: Option<i64>,
    ) -> bool {
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
            // A store failure as any other: the outage's own lines tell it.
            Err(err) => {
                let next = self.ctl.as_ref().map_or(Duration::ZERO, |c| c.every);
                self.store_failed("polling the controls", &err, next);
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
        // Before any row starts: its start-up catches up none of the ticks these
        // dropped.
        for resume in &state.resumed {
            if !resume.catch_up
                && resume.node.as_deref().is_none_or(|n| n == &*self.s.node)
                && let Some(ctl) = &mut self.ctl
            {
                let window = (resume.paused_since, resume.resumed_at);
                ctl.dropped.insert(resume.job.clone(), window);
            }
        }
        if let Some(window) = self.ctl.as_mut().and_then(|c| c.window.as_mut()) {
            window.paused = state.paused.iter().map(|p| p.job.clone()).collect();
        }
        let mut changed = state.schedules;
        changed.retain(|row| self.applies_change(row));
        if let Some(ctl) = &mut self.ctl {
            ctl.relaid = Some(HashMap::new());
        }
        self.apply_schedules(changed);
        // The first read returns every resume ever made. Start-up applied the
        // catch-up policy to those before it, except that under `CatchUp::All` it
        // left the ticks a pause ended by a catch-up covered to that catch-up (which
        // may never have run: every instance was down), within its window; a job
        // paused at start-up had its ticks refused, and one resumed since is caught
        // up here.
        let initial = self
            .ctl
            .as_mut()
            .is_some_and(|c| !std::mem::replace(&mut c.applied, true));
        for resume in &state.resumed {
            let entries = self.entries_of(&resume.job);
            if resume.node.as_deref().is_none_or(|n| n == &*self.s.node) {
                for &i in &entries {
                    self.jobs[i].on_resume_read();
                }
            }
            if !entries.is_empty() {
                self.catch_up_resume(resume, &entries, (first, initial), now);
            } else if initial
                && resume.catch_up
                && resume.node.as_deref().is_none_or(|n| n == &*self.s.node)
                && let Some(ctl) = &mut self.ctl
            {
                // A dynamic schedule not applied yet (a first poll's rows are
                // applied over many turns) or not loaded yet (rows loaded as they
                // come due): its resume is applied when its row starts.
                ctl.unresumed
                    .entry(resume.job.clone())
                    .or_default()
                    .push(resume.clone());
            }
        }
        let mut waiting: Vec<Trigger> = Vec::new();
        for t in state.triggers {
            // While rows are still being applied, a trigger of a dynamic schedule
            // not applied yet is kept (claimed once its entries exist); so is one
            // whose row is to be loaded.
            if t.node.as_deref().is_none_or(|n| n == &*self.s.node)
                && (!self.entries_of(&t.job).is_empty()
                    || self.ctl.as_ref().is_some_and(|c| !c.rows.is_empty())
                    || self.waits_for_row(&t))
                && !self.runs_trigger(&t)
            {
                waiting.push(t);
            }
        }
        if let Some(ctl) = &mut self.ctl {
            ctl.waiting = waiting;
            ctl.relaid = None;
        }
    }

    /// What `resume` catches up of job `entries` (slot 0 first), as [`on_resume`]
    /// says: `(first, initial)`, whether the poll read every control from scratch,
    /// and whether it is the first poll applied since start-up (or, for a row
    /// started after it, whether the resume was read by that poll).
    pub(super) fn catch_up_resume(
        &mut self,
        resume: &Resume,
        entries: &[usize],
        (first, initial): (bool, bool),
        now: DateTime<Utc>,
    ) {
        let Some(&slot0) = entries.first() else {
            return;
        };
        let e = &self.s.entries[slot0];
        let job = ResumedJob {
            catch_up: e.job_policy.catch_up,
            scope: e.scope,
            slots: u32::try_from(entries.len()).unwrap_or(u32::MAX),
            started: self.ctl.as_ref().and_then(|c| c.started),
            all_caught_up_from: self.jobs[slot0].catch_up_from(),
            changed: self
                .ctl
                .as_ref()
                .and_then(|c| c.dynamic.get(resume.job.as_str()))
                .and_then(|d| d.changed),
        };
        match on_resume(resume, job, &self.s.node, first, initial) {
            ResumeAction::Nothing => {}
            ResumeAction::Backfill { keep } => {
                let ran = self
                    .ctl
                    .as_mut()
                    .and_then(|c| c.relaid.as_mut()?.remove(resume.job.as_str()))
                    .unwrap_or_default();
                self.catch_up_all(slot0, (resume.paused_since, resume.resumed_at), keep, &ran);
            }
            ResumeAction::PerEntry => {
                for &i in entries {
                    let e = &self.s.entries[i];
                    info!(job = %e.name, paused_since = %resume.paused_since,
                        "job resumed: catching up the ticks paused over, as its catch-up policy says");
                    self.jobs[i].on_resumed(&e.cadence, resume.paused_since, now);
                }
            }
        }
    }

    /// Catches up the most recent `max` ticks of entry `i`'s job paused over
    /// (`since` to `until`, a pause under [`CatchUp::All`](crate::CatchUp::All))
    /// other than those in `ran`, as a backfill on this loop: each tick under a
    /// lease of its own, once across the instances that all start it, one at a
    /// time (a tick in `ran` between others splits them into backfills that run
    /// side by side); counted `backfilled`.
    fn catch_up_all(
        &mut self,
        i: usize,
        (since, until): (DateTime<Utc>, DateTime<Utc>),
        max: u32,
        ran: &[crate::lease::Tick],
    ) {
        let e = &self.s.entries[i];
        // As many as start-up may have left to it (`max` a slot), not capped lower.
        let keep = usize::try_from(max).unwrap_or(usize::MAX);
        let mut ticks = e
            .schedule
            .latest_ticks(since, until, keep.saturating_add(ran.len()));
        ticks.retain(|tick| !ran.contains(tick));
        while ticks.len() > keep {
            ticks.pop_front();
        }
        info!(job = %e.name, paused_since = %since, ticks = ticks.len(), left = ran.len(),
            "job resumed: catching up every tick paused over, each under a lease of its own");
        // Consecutive ticks of the schedule make one range (first, last, count); a
        // tick that ran splits it.
        let mut ranges: Vec<(DateTime<Utc>, DateTime<Utc>, usize)> = Vec::new();
        for tick in ticks {
            match ranges.last_mut() {
                Some((_, last, count))
                    if e.schedule
                        .next_after(*last)
                        .is_some_and(|next| next == tick) =>
                {
                    *last = tick.at();
                    *count += 1;
                }
                _ => ranges.push((tick.at(), tick.at(), 1)),
            }
        }
        for (from, to, count) in ranges {
            match self.s.catch_up_request(i, from, to, count) {
                Ok(request) => self.add_backfill(request),
                Err(err) => {
                    let job = &self.s.entries[i].name;
                    warn!(job = %job, error = %err, "catching up the ticks paused over failed")
                }
            }
        }
    }

    /// The live entries of job `job`, slot 0 first.
    fn entries_of(&self, job: &str) -> Vec<usize> {
        self.ctl
            .as_ref()
            .and_then(|c| c.by_name.get(job))
            .map_or_else(Vec::new, |slots| slots.clone().collect())
    }
}
