//! The memory store's controls: the same rules as the SQL stores' tables, in maps.
//! The tables are here; the [`Controls`](crate::Controls) impl on them is in
//! `operations`.

mod due;
mod operations;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

#[cfg(doc)]
use super::MemoryStore;
use crate::control::{
    ControlAction, ControlRecord, ControlRequest, ControlSignal, Heartbeat, InstanceRow, Pause,
    ScheduleRow, Trigger, TriggerState,
};
use crate::lease::{Holder, LeaseName, TakeRequest};

/// The control tables.
#[derive(Debug)]
pub(super) struct Tables {
    /// The shortest `every` period a dynamic schedule put may have
    /// ([`MemoryStore::set_min_schedule_period`]).
    pub(super) min_schedule_period: std::time::Duration,
    version: i64,
    /// Pauses by (job, node; "" for every node).
    controls: BTreeMap<(String, String), ControlRow>,
    audit: Vec<ControlRecord>,
    triggers: Vec<TriggerRow>,
    schedules: BTreeMap<String, ScheduleRow>,
    /// Each dynamic schedule's bound, by name (`crate::control::due`).
    bounds: BTreeMap<String, DateTime<Utc>>,
    handlers: BTreeMap<(String, String), DateTime<Utc>>,
    /// The jobs each node runs, by (job, node).
    jobs: BTreeMap<(String, String), DateTime<Utc>>,
    /// The instances that beat, by node.
    instances: BTreeMap<String, InstanceRow>,
    /// The announcements of changes, once a test asked for them
    /// ([`MemoryStore::announce_controls`]).
    pub(super) announce: Option<tokio::sync::watch::Sender<ControlSignal>>,
    /// Polls answered.
    pub(super) polls: u64,
}

impl Default for Tables {
    fn default() -> Self {
        Self {
            min_schedule_period: crate::control::DEFAULT_MIN_SCHEDULE_PERIOD,
            version: 0,
            controls: BTreeMap::new(),
            audit: Vec::new(),
            triggers: Vec::new(),
            schedules: BTreeMap::new(),
            bounds: BTreeMap::new(),
            handlers: BTreeMap::new(),
            jobs: BTreeMap::new(),
            instances: BTreeMap::new(),
            announce: None,
            polls: 0,
        }
    }
}

#[derive(Debug, Clone)]
struct ControlRow {
    paused: bool,
    since: DateTime<Utc>,
    by: String,
    why: String,
    resumed_at: Option<DateTime<Utc>>,
    catch_up: bool,
    version: i64,
}

#[derive(Debug, Clone)]
struct TriggerRow {
    trigger: Trigger,
    /// The lease it was claimed under.
    lease: Option<LeaseName>,
    /// Whether that lease's row was released as completed before the claim (what
    /// the finish puts back: a SQL store's `prev_released_at`).
    prev_completed: bool,
}

impl Tables {
    /// Bumps the control version, announcing it while the watch is live.
    fn bump(&mut self) {
        self.version += 1;
        if let Some(tx) = &self.announce {
            tx.send_if_modified(|s| {
                if s.live {
                    s.changes += 1;
                }
                s.live
            });
        }
    }

    /// Whether `req`'s job is paused for its node, or its tick lies within a pause
    /// that ended with a catch-up and the request says the catch-up runs it
    /// ([`ControlKey::caught_up_on_resume`](crate::ControlKey)).
    pub(super) fn paused(&self, req: &TakeRequest) -> bool {
        let Some(key) = &req.control else {
            return false;
        };
        let tick = req.tick.at();
        [String::new(), key.node.to_string()]
            .into_iter()
            .any(|node| {
                self.controls
                    .get(&(key.job.to_string(), node))
                    .is_some_and(|c| {
                        c.paused
                            || (key.caught_up_on_resume
                                && c.catch_up
                                && c.resumed_at.is_some_and(|r| c.since <= tick && tick <= r))
                    })
            })
    }

    /// Whether the lease row `name`, held by `holder`, is a triggered run's claim that
    /// took it from a tick released as completed: the completion the trigger keeps
    /// (and its finish puts back), which the row's own `completed` no longer shows.
    pub(super) fn keeps_completion(&self, name: &LeaseName, holder: &Holder) -> bool {
        self.triggers.iter().any(|r| {
            r.prev_completed
                && r.lease.as_ref() == Some(name)
                && matches!(&r.trigger.state, TriggerState::Running { holder: h, .. } if h == holder)
        })
    }

    /// The instant of the trigger whose run holds the lease row `name` as `holder`,
    /// if a triggered run holds it (the row's own tick stays the scheduled one).
    pub(super) fn triggered_at(&self, name: &LeaseName, holder: &Holder) -> Option<DateTime<Utc>> {
        self.triggers
            .iter()
            .find(|r| {
                r.lease.as_ref() == Some(name)
                    && matches!(&r.trigger.state, TriggerState::Running { holder: h, .. } if h == holder)
            })
            .map(|r| r.trigger.requested_at)
    }

    /// Whether `node`'s registrations count at `now`: it is live, or it never beat
    /// ([`Controls::handlers`](crate::Controls::handlers)).
    fn counts(&self, node: &str, now: DateTime<Utc>) -> bool {
        self.instances.get(node).is_none_or(|i| i.is_live(now))
    }

    /// The handlers that count at `now`, sorted, once each.
    fn live_handlers(&self, now: DateTime<Utc>) -> Vec<String> {
        let mut names: Vec<String> = self
            .handlers
            .keys()
            .filter(|(_, node)| self.counts(node, now))
            .map(|(h, _)| h.clone())
            .collect();
        names.dedup();
        names
    }

    /// The jobs that count at `now`, sorted, once each.
    fn live_jobs(&self, now: DateTime<Utc>) -> Vec<String> {
        let mut names: Vec<String> = self
            .jobs
            .keys()
            .filter(|(_, node)| self.counts(node, now))
            .map(|(job, _)| job.clone())
            .collect();
        names.dedup();
        names
    }

    /// `beat`'s row, seen at `now`.
    fn beat(&mut self, beat: &Heartbeat, now: DateTime<Utc>) {
        let row = InstanceRow {
            node: beat.node.clone(),
            version: beat.version.clone(),
            started_at: beat.started_at,
            seen_at: now,
            expires_at: now + beat.expiry(),
            stopped: false,
            handlers: Vec::new(),
            jobs: Vec::new(),
        };
        self.instances.insert(beat.node.clone(), row);
    }

    /// Marks `node`'s row stopped, if it has one.
    fn stop(&mut self, node: &str) {
        if let Some(row) = self.instances.get_mut(node) {
            row.stopped = true;
        }
    }

    /// Every instance, by node, with its node's registrations.
    fn instances(&self) -> Vec<InstanceRow> {
        let of = |map: &BTreeMap<(String, String), DateTime<Utc>>, node: &str| {
            map.keys()
                .filter(|(_, n)| n == node)
                .map(|(name, _)| name.clone())
                .collect()
        };
        self.instances
            .values()
            .map(|row| InstanceRow {
                handlers: of(&self.handlers, &row.node),
                jobs: of(&self.jobs, &row.node),
                ..row.clone()
            })
            .collect()
    }

    /// Every pause in force, by job and node.
    fn paused_now(&self) -> Vec<Pause> {
        self.controls
            .iter()
            .filter(|(_, c)| c.paused)
            .map(|((job, node), c)| Pause {
                job: job.clone(),
                node: none_if_empty(node),
                since: c.since,
                by: c.by.clone(),
                why: c.why.clone(),
            })
            .collect()
    }

    /// The triggers not done, oldest first.
    fn open_triggers(&self) -> Vec<Trigger> {
        self.triggers
            .iter()
            .filter(|r| !matches!(r.trigger.state, TriggerState::Done { .. }))
            .map(|r| r.trigger.clone())
            .collect()
    }

    fn record(
        &mut self,
        now: DateTime<Utc>,
        req: &ControlRequest,
        action: ControlAction,
        detail: String,
    ) -> ControlRecord {
        self.bump();
        let record = ControlRecord {
            id: i64::try_from(self.audit.len()).unwrap_or(i64::MAX) + 1,
            at: now,
            job: req.job.clone(),
            node: req.node.clone(),
            action,
            by: req.by.clone(),
            why: req.why.clone(),
            detail,
        };
        self.audit.push(record.clone());
        record
    }
}

fn node_key(node: Option<&String>) -> String {
    node.cloned().unwrap_or_default()
}

/// A node as the tables key it (`""`: every node) as the API says it.
fn none_if_empty(node: &str) -> Option<String> {
    (!node.is_empty()).then(|| node.to_owned())
}

/// A rough check that `text` is a JSON value (the SQL stores ask their database):
/// enough for unit tests.
pub(super) fn looks_like_json(text: &str) -> bool {
    let t = text.trim();
    let balanced = |open: char, close: char| t.starts_with(open) && t.ends_with(close);
    balanced('{', '}')
        || balanced('[', ']')
        || balanced('"', '"')
        || t.parse::<f64>().is_ok()
        || matches!(t, "true" | "false" | "null")
}
