//! Dynamic schedules loaded as they come due
//! ([`SchedulerBuilder::load_schedules_when_due`](crate::SchedulerBuilder::load_schedules_when_due)):
//! each poll also moves forward the bounds of the rows run here
//! ([`Controls::advance_schedules`]), reads the rows of this instance's handlers
//! due within the look-ahead ([`Controls::due_schedules`]) and the rows of
//! triggers not loaded here, by name; the loop loads those it does not run yet,
//! from their bound on.
//!
//! A bound is a lower bound: a row loaded too early costs a refused take, never a
//! tick. A row must be loaded before its tick (one loaded after it starts under its
//! catch-up policy), so the look-ahead is three poll intervals, at least
//! [`MIN_AHEAD`].

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;
use tracing::debug;

use super::super::Engine;
use super::super::jobs::Jobs;
use crate::control::{Advance, Controls, DueCursor, DueSchedule, ScheduleRow, Trigger};
use crate::job::Scope;
use crate::runtime::decide::JobTicks;

/// Rows read per due read statement.
const DUE_PAGE: u32 = 10_000;

/// Names asked per read of the changes of the rows held.
const CHANGED_CHUNK: usize = 10_000;

/// The look-ahead of the due reads unless set.
const MIN_AHEAD: Duration = Duration::from_secs(30);

/// The loop's side of loading rows as they come due.
#[derive(Debug, Default)]
pub(in crate::runtime::engine) struct Window {
    /// How far ahead of now the due reads look.
    ahead: Duration,
    /// Rows to read by name at the next poll: jobs of triggers not loaded here.
    to_load: BTreeSet<String>,
    /// Rows read by name that this instance does not run (another handler's, or
    /// gone): their triggers are left to others.
    not_here: HashSet<String>,
    /// The bounds of the rows read as due and queued, by name.
    bounds: HashMap<String, DateTime<Utc>>,
    /// The jobs paused (everywhere or on a node), as last read: their rows are not
    /// let go, so the instances that hold them see the resume and catch up.
    pub(in crate::runtime::engine) paused: HashSet<String>,
    /// Entries of rows let go (the first of each row's), by how many the row had,
    /// each with when: reused by a row of as many loaded once no store call's
    /// answer about the old row can still come ([`Window::reusable`]).
    free: HashMap<usize, std::collections::VecDeque<(usize, Instant)>>,
    /// Entries of old versions of rows changed or removed, each block with when it
    /// was retired: freed once every entry in it is idle and a quarantine has
    /// passed since (a take sent before the retirement may still be answered and
    /// its run start: it ends as it would first).
    retired: Vec<(std::ops::Range<usize>, Instant)>,
    /// How long a freed entry waits before it is reused.
    quarantine: Duration,
    /// How many rows are held before idle ones are let go.
    held: usize,
}

impl Window {
    /// Rows read every `poll_every`; an entry freed is reused after `quarantine`
    /// (two renewal periods and a second: no store call is waited for longer);
    /// idle rows let go while more than `held` are held.
    pub(in crate::runtime::engine) fn new(
        poll_every: Duration,
        ahead: Option<Duration>,
        quarantine: Duration,
        held: usize,
    ) -> Self {
        Self {
            ahead: ahead.unwrap_or(MIN_AHEAD).max(poll_every.saturating_mul(3)),
            quarantine,
            held,
            ..Self::default()
        }
    }

    /// The first of `count` entries freed together long enough ago to be reused,
    /// if any.
    pub(in crate::runtime::engine) fn reusable(&mut self, count: usize) -> Option<usize> {
        let free = self.free.get_mut(&count)?;
        let (i, freed) = *free.front()?;
        if freed.elapsed() < self.quarantine {
            return None;
        }
        free.pop_front();
        Some(i)
    }

    /// The entries of a row's old version (the row changed or removed), retired
    /// now: freed for reuse once idle and quarantined.
    pub(in crate::runtime::engine) fn retire(&mut self, block: std::ops::Range<usize>) {
        self.retired.push((block, Instant::now()));
    }

    /// Frees `block` (its entries' tick state dropped): reused whole by a row of as
    /// many entries once quarantined.
    fn free(&mut self, jobs: &mut Jobs, block: std::ops::Range<usize>) {
        for i in block.clone() {
            jobs[i] = JobTicks::default();
        }
        let free = self.free.entry(block.len()).or_default();
        free.push_back((block.start, Instant::now()));
    }

    /// The bound row `name` was read with as due, if it was (once: it is loaded).
    pub(in crate::runtime::engine) fn bound_of(&mut self, name: &str) -> Option<DateTime<Utc>> {
        self.bounds.remove(name)
    }
}

/// What a poll reads besides the controls, off the loop.
pub(in crate::runtime::engine) struct WindowRead {
    advances: Vec<Advance>,
    handlers: Vec<String>,
    until: DateTime<Utc>,
    by_name: Vec<String>,
    /// The rows whose changes a poll reads: those loaded, queued to load, or
    /// refused here (a changed row may be this instance's now). No other change
    /// reaches this instance but through the due reads: a bulk put of a million
    /// rows is not read whole by every instance.
    held: Vec<String>,
}

/// Its answer: the rows due, and the rows of triggers read by name (with the names
/// asked, found or not).
#[derive(Default)]
pub(in crate::runtime::engine) struct WindowRows {
    due: Vec<DueSchedule>,
    by_name: Vec<(String, Option<ScheduleRow>)>,
}

impl WindowRead {
    /// The changes of the rows held, after control version `since`, no later than
    /// `upto` (the poll's version: a later change is the next poll's).
    pub(in crate::runtime::engine) async fn changed(
        &self,
        c: &dyn Controls,
        since: i64,
        upto: i64,
    ) -> crate::Result<Vec<ScheduleRow>> {
        let mut changed = Vec::new();
        for names in self.held.chunks(CHANGED_CHUNK) {
            changed.extend(c.changed_schedules(since, upto, names).await?);
        }
        Ok(changed)
    }

    /// Sends the advances (a failure is harmless: the bounds stay earlier), then
    /// reads the rows due and the rows asked for by name.
    pub(in crate::runtime::engine) async fn read(
        self,
        c: &dyn Controls,
    ) -> crate::Result<WindowRows> {
        if !self.advances.is_empty() {
            match c.advance_schedules(&self.advances).await {
                Ok(moved) => debug!(
                    asked = self.advances.len(),
                    moved, "schedule bounds advanced"
                ),
                Err(err) => {
                    debug!(error = %err, "advancing schedule bounds failed; they stay earlier")
                }
            }
        }
        let mut rows = WindowRows::default();
        let mut after: Option<DueCursor> = None;
        loop {
            let page = c
                .due_schedules(&self.handlers, self.until, after.as_ref(), DUE_PAGE)
                .await?;
            let full = page.len() == DUE_PAGE as usize;
            after = page.last().map(DueSchedule::cursor);
            rows.due.extend(page);
            if !full || after.is_none() {
                break;
            }
        }
        for name in self.by_name {
            let row = c.schedule(&name).await?;
            rows.by_name.push((name, row));
        }
        Ok(rows)
    }
}

impl Engine {
    /// What the poll about to start reads besides the controls: `None` unless rows
    /// are loaded as they come due. Computes the advances of the rows run here in
    /// the cluster scope: each to the earliest tick its entries have still to
    /// decide, when that moved past what the store was last told.
    pub(in crate::runtime::engine) fn window_read(&mut self) -> Option<WindowRead> {
        // Nothing to compute for an instance that loads every row at start-up.
        self.ctl.as_ref()?.window.as_ref()?;
        let until = self.db_now();
        let mut handlers: Vec<String> = self.s.handlers.keys().cloned().collect();
        handlers.sort();
        let ctl = self.ctl.as_mut()?;
        let window = ctl.window.as_mut()?;
        let until = until + TimeDelta::from_std(window.ahead).unwrap_or(TimeDelta::zero());
        // The rows of the triggers still waiting for theirs, asked again at every
        // poll until loaded (a poll that failed, or answered nothing new, loses none).
        for t in &ctl.waiting {
            if !ctl.by_name.contains_key(t.job.as_str())
                && ctl.job_names.binary_search(&t.job).is_err()
                && !window.not_here.contains(&t.job)
            {
                window.to_load.insert(t.job.clone());
            }
        }
        let by_name = std::mem::take(&mut window.to_load).into_iter().collect();
        // A row idle here whose next tick is further than the look-ahead and half
        // again is let go: its bound moves to that tick, and the due reads load it
        // again before it.
        let half = TimeDelta::from_std(window.ahead / 2).unwrap_or(TimeDelta::zero());
        let horizon = until + half;
        let triggered: HashSet<&str> = ctl.waiting.iter().map(|t| t.job.as_str()).collect();
        let mut advances = Vec::new();
        let mut let_go = Vec::new();
        // Only the rows held past the budget are let go.
        let excess = ctl.dynamic.len().saturating_sub(window.held);
        for (name, d) in &mut ctl.dynamic {
            if !d.cluster {
                continue;
            }
            let undecided = d
                .entries
                .clone()
                .filter_map(|i| self.jobs[i].first_undecided())
                .min();
            if let Some(at) = undecided
                && d.advanced.is_none_or(|was| at > was)
            {
                d.advanced = Some(at);
                advances.push(Advance {
                    name: name.to_string(),
                    version: d.version,
                    next_tick: at,
                });
            }
            if let_go.len() < excess
                && undecided.is_some_and(|at| at > horizon)
                && d.entries.clone().all(|i| self.jobs[i].is_idle())
                && !triggered.contains(&**name)
                && !window.paused.contains(&**name)
            {
                let_go.push(std::sync::Arc::clone(name));
            }
        }
        // The old versions' entries whose runs ended are freed as well, once no
        // take sent before their retirement can still be answered.
        for (block, retired) in std::mem::take(&mut window.retired) {
            if retired.elapsed() >= window.quarantine
                && block.clone().all(|i| self.jobs[i].is_idle())
            {
                window.free(&mut self.jobs, block);
            } else {
                window.retired.push((block, retired));
            }
        }
        for name in let_go {
            let Some(d) = ctl.dynamic.remove(&name) else {
                continue;
            };
            ctl.by_name.remove(&name);
            window.free(&mut self.jobs, d.entries);
            self.s.stats.untrack(&name);
        }
        let held = ctl
            .dynamic
            .keys()
            .map(|name| name.to_string())
            .chain(window.not_here.iter().cloned())
            .chain(window.bounds.keys().cloned())
            .chain(ctl.rows.iter().map(|row| row.name.clone()))
            .collect();
        Some(WindowRead {
            advances,
            handlers,
            until,
            by_name,
            held,
        })
    }

    /// Whether a changed row read by a poll is applied here: always, unless rows
    /// are loaded as they come due, where only rows run here are (the others are
    /// left to the due reads: their put wrote their bound; a trigger of one is
    /// this instance's again if its handler is).
    pub(in crate::runtime::engine) fn applies_change(&mut self, row: &ScheduleRow) -> bool {
        let Some(ctl) = self.ctl.as_mut() else {
            return true;
        };
        let Some(window) = ctl.window.as_mut() else {
            return true;
        };
        // Changed: its triggers may be this instance's now.
        window.not_here.remove(&row.name);
        // A row queued to load is queued again as changed, after the old.
        ctl.dynamic.contains_key(row.name.as_str())
            || window.bounds.contains_key(&row.name)
            || ctl.rows.iter().any(|queued| queued.name == row.name)
    }

    /// Queues the rows due and the rows read by name that do not run here yet, each
    /// with its bound (a row read by name: none, it starts after its change).
    pub(in crate::runtime::engine) fn apply_window(&mut self, rows: WindowRows) {
        let handlers = &self.s.handlers;
        let Some(ctl) = self.ctl.as_mut() else {
            return;
        };
        let Some(window) = ctl.window.as_mut() else {
            return;
        };
        let mut load = Vec::new();
        for due in rows.due {
            if !ctl.dynamic.contains_key(due.row.name.as_str()) {
                window.bounds.insert(due.row.name.clone(), due.next_tick);
                load.push(due.row);
            }
        }
        for (name, row) in rows.by_name {
            match row {
                Some(row) if handlers.contains_key(&row.handler) => {
                    if !ctl.dynamic.contains_key(name.as_str())
                        && !window.bounds.contains_key(&name)
                    {
                        load.push(row);
                    }
                }
                _ => {
                    window.not_here.insert(name);
                }
            }
        }
        ctl.rows.extend(load);
        self.apply_some_schedules();
    }

    /// Whether trigger `t` waits here for its row to load: rows are loaded as they
    /// come due, its job is no job of this instance yet, and its row is not known
    /// to be another's. Its row is read by name at the next poll: at once for a
    /// trigger new to this poll (not on the timer; one whose row did not load since
    /// waits for the timer).
    pub(in crate::runtime::engine) fn waits_for_row(&mut self, t: &Trigger) -> bool {
        let Some(ctl) = self.ctl.as_mut() else {
            return false;
        };
        let code =
            ctl.job_names.binary_search(&t.job).is_ok() || ctl.dynamic.contains_key(t.job.as_str());
        let Some(window) = ctl.window.as_mut() else {
            return false;
        };
        if code || window.not_here.contains(&t.job) {
            return false;
        }
        window.to_load.insert(t.job.clone());
        // `waiting` is still the last poll's.
        if !ctl.waiting.iter().any(|w| w.id == t.id) {
            ctl.next = Instant::now();
        }
        true
    }
}

/// Whether entries of scope `scope` have their row's bound moved forward: a
/// node-scoped row's ticks are each node's to decide, so one node cannot move its
/// bound past a tick another has not run.
pub(in crate::runtime::engine) fn advances(scope: Scope) -> bool {
    scope == Scope::Cluster
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row let go frees its entries as one block: reused whole by a row of as
    /// many entries (a concurrent row's slots lie side by side), once quarantined.
    #[tokio::test(start_paused = true)]
    async fn a_freed_block_is_reused_by_a_row_of_as_many_entries() {
        let quarantine = Duration::from_secs(3);
        let mut window = Window::new(Duration::from_secs(1), None, quarantine, 0);
        window
            .free
            .entry(1)
            .or_default()
            .push_back((7, Instant::now()));
        window
            .free
            .entry(2)
            .or_default()
            .push_back((4, Instant::now()));
        assert_eq!(window.reusable(2), None, "still quarantined");
        tokio::time::sleep(quarantine).await;
        assert_eq!(window.reusable(3), None, "no block of three");
        assert_eq!(window.reusable(2), Some(4));
        assert_eq!(window.reusable(2), None, "reused once");
        assert_eq!(window.reusable(1), Some(7));
    }

    /// A row changed again and again takes no more room than it needs: the entries
    /// of each old version, once idle, are freed and reused by the next version
    /// after their quarantine. Before, every change added entries kept until the
    /// instance restarted (a table of rows changed every day grew every day).
    #[tokio::test(start_paused = true)]
    async fn the_entries_of_a_changed_row_are_reused_once_idle() {
        let scheduler = crate::Scheduler::builder(crate::MemoryStore::new())
            .node_id("n")
            .handler("h", |_ctx, _args| async { Ok(()) })
            .build()
            .expect("a scheduler");
        let mut engine = crate::runtime::engine::Engine::new(scheduler);
        let row = |version: i64| {
            let mut row = ScheduleRow::new("r", "h", format!("0 {version} 3 * * *"));
            row.version = version;
            row
        };
        engine.apply_schedules(vec![row(1)]);
        let first = engine.jobs.len();
        for version in 2..12 {
            engine.apply_schedules(vec![row(version)]);
            engine.window_read();
            tokio::time::sleep(Duration::from_secs(120)).await;
        }
        assert!(
            engine.jobs.len() <= first + 2,
            "{} entries for one row after ten changes ({first} after its first version)",
            engine.jobs.len()
        );
    }
}
