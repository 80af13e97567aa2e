//! Dynamic schedules, as the loop meets them: rows read by the polls, applied a
//! chunk per turn; a changed or removed row's entries retired, a new one's started
//! after its change ([`on_schedule_row`]).

use std::sync::Arc;

use tracing::{info, warn};

use super::super::Engine;
use super::Dynamic;
use crate::control::ScheduleRow;
use crate::error::Error;
use crate::runtime::decide::{JobTicks, RowAction, on_schedule_row};
use crate::runtime::dynamic::DynamicJob;
use crate::runtime::entries_for;

/// How many dynamic schedule rows one turn of the loop applies at least (at most
/// when it runs few jobs).
const APPLY_CHUNK: usize = 2_000;

/// A turn applies up to one row per this many jobs it runs already (when more than
/// [`APPLY_CHUNK`]): a fixed chunk made a first poll of a million rows take 500
/// turns, each (before the jobs were indexed) scanning up to a million jobs.
const APPLY_SHARE: usize = 8;

/// How long a turn applies rows once it applied [`APPLY_CHUNK`] (on tokio's clock,
/// checked every [`APPLY_CHECK`] rows): the loop's other work (ticks of the rows
/// applied already) waits no longer than this for the rest (a share of 375,000 rows
/// per turn at three million held ticks back 37 s).
const APPLY_BUDGET: std::time::Duration = std::time::Duration::from_millis(50);

/// How many rows are applied between two looks at the clock.
const APPLY_CHECK: usize = 256;

impl Engine {
    /// Adds, changes and drops dynamic schedules as their rows say.
    pub(in crate::runtime::engine) fn apply_schedules(&mut self, rows: Vec<ScheduleRow>) {
        if let Some(ctl) = &mut self.ctl {
            if ctl.rows.is_empty() {
                // Taken as it is: a first poll's million rows are not copied.
                ctl.rows = rows.into();
            } else {
                ctl.rows.extend(rows);
            }
            // Room for every row read at once (each has one entry or more): the
            // tables do not double past what they need, nor hold the old and the
            // new table at once (at a million rows, hundreds of MB either way).
            let incoming = ctl.rows.len();
            ctl.dynamic.reserve(incoming);
            ctl.by_name.reserve(incoming);
            self.jobs.reserve(incoming);
            self.s.entries.reserve(incoming);
        }
        self.apply_some_schedules();
    }

    /// Applies up to [`APPLY_CHUNK`] of the rows read and not yet applied, or one
    /// per [`APPLY_SHARE`] jobs already running if more, for at most
    /// [`APPLY_BUDGET`] past the first [`APPLY_CHUNK`]: a first poll of a million
    /// rows is applied over many turns of the loop, which renews, takes and
    /// releases in between.
    pub(in crate::runtime::engine) fn apply_some_schedules(&mut self) {
        if self.ctl.as_ref().is_none_or(|ctl| ctl.rows.is_empty()) {
            return;
        }
        let chunk = APPLY_CHUNK.max(self.jobs.len() / APPLY_SHARE);
        let began = tokio::time::Instant::now();
        let now = self.db_now();
        for applied in 0..chunk {
            if applied >= APPLY_CHUNK
                && applied % APPLY_CHECK == 0
                && began.elapsed() >= APPLY_BUDGET
            {
                return;
            }
            let Some(ctl) = &mut self.ctl else {
                return;
            };
            let Some(row) = ctl.rows.pop_front() else {
                // The rows' room (a first poll's, the largest) is given back.
                ctl.rows = std::collections::VecDeque::new();
                return;
            };
            let bound = ctl.window.as_mut().and_then(|w| w.bound_of(&row.name));
            let running = ctl.dynamic.get(row.name.as_str()).map(|d| d.version);
            if on_schedule_row(running, &row) == RowAction::Keep {
                continue;
            }
            // Drop what runs of the old row: a run under way ends as it would.
            if let Some(old) = ctl.dynamic.remove(row.name.as_str()) {
                ctl.by_name.remove(row.name.as_str());
                if let Some(relaid) = ctl.relaid.as_mut() {
                    let won: Vec<_> = old
                        .entries
                        .clone()
                        .filter_map(|i| self.jobs[i].last_won())
                        .collect();
                    if !won.is_empty() {
                        relaid.insert(row.name.as_str().into(), won);
                    }
                }
                for i in old.entries.clone() {
                    let mut events = Vec::new();
                    self.jobs[i].retire(&mut events);
                    self.act(i, &mut events);
                }
                // Loaded as they come due: freed for reuse once idle.
                if let Some(window) = self.ctl.as_mut().and_then(|c| c.window.as_mut()) {
                    window.retire(old.entries);
                }
                info!(schedule = %row.name, "dynamic schedule dropped or changed");
            }
            if on_schedule_row(None, &row) == RowAction::Drop {
                continue;
            }
            match self.dynamic_entries(&row, now) {
                Ok(entries) => {
                    // A row takes the place of one of as many entries let go, if
                    // any is free (rows loaded as they come due).
                    let reused = self
                        .ctl
                        .as_mut()
                        .and_then(|ctl| ctl.window.as_mut())
                        .and_then(|w| w.reusable(entries.len()));
                    let first = reused.unwrap_or(self.s.entries.len());
                    let count = entries.len();
                    // No tick before the row's bound: the instances decided those.
                    let after = bound.map(|b| b - chrono::TimeDelta::microseconds(1));
                    let changed = row.updated_at.max(after);
                    let cluster = entries.iter().all(|e| super::window::advances(e.scope));
                    let dropped = self
                        .ctl
                        .as_ref()
                        .and_then(|c| c.dropped.get(&row.name))
                        .copied();
                    for (k, entry) in entries.into_iter().enumerate() {
                        let mut ticks = JobTicks::default();
                        ticks.start_after(&entry.cadence, changed, now);
                        if let Some((since, until)) = dropped {
                            ticks.drop_within(&entry.cadence, since, until);
                        }
                        match reused {
                            Some(first) => {
                                self.jobs[first + k] = ticks;
                                self.s.entries[first + k] = entry;
                            }
                            None => {
                                self.jobs.push(ticks);
                                self.s.entries.push(entry);
                            }
                        }
                    }
                    for i in first..first + count {
                        self.spread(i, &row.handler);
                    }
                    self.s.stats.track(&row.name);
                    info!(schedule = %row.name, handler = %row.handler, every = %row.schedule,
                        "dynamic schedule running");
                    // The entries' own name, not another copy of it.
                    let name: Arc<str> = self
                        .s
                        .entries
                        .get(first)
                        .map_or_else(|| row.name.as_str().into(), |e| Arc::clone(&e.name));
                    let unresumed = self
                        .ctl
                        .as_mut()
                        .and_then(|c| c.unresumed.remove(&row.name));
                    if let Some(ctl) = &mut self.ctl {
                        ctl.reported.remove(&row.name);
                        ctl.by_name.insert(Arc::clone(&name), first..first + count);
                        ctl.dynamic.insert(
                            name,
                            Dynamic {
                                version: row.version,
                                entries: first..first + count,
                                handler: row.handler.as_str().into(),
                                cluster,
                                advanced: bound,
                                changed: row.updated_at,
                            },
                        );
                    }
                    // The resumes the first poll read before this row started.
                    let entries: Vec<usize> = (first..first + count).collect();
                    for resume in unresumed.unwrap_or_default() {
                        self.catch_up_resume(&resume, &entries, (true, true), now);
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
        &mut self,
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
        let mut alone = crate::schedule::CronCache::default();
        let crons = match self.ctl.as_mut() {
            Some(ctl) => &mut ctl.crons,
            None => &mut alone,
        };
        let node = &self.s.node;
        entries_for(
            Arc::new(job),
            policy,
            node,
            &self.s.holder_prefix,
            now,
            crons,
        )
    }
}
