//! What a poll reads ([`ControlState`]): the pauses, the resumes and the triggers.

use std::fmt;

use chrono::{DateTime, Utc};

#[cfg(doc)]
use super::Controls;
use super::ScheduleRow;
use crate::lease::Holder;
use crate::outcome::Outcome;

/// A job paused now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    /// The job.
    pub job: String,
    /// The node it is paused on, or `None`: every node.
    pub node: Option<String>,
    /// Since when, on the store's clock.
    pub since: DateTime<Utc>,
    /// Who paused it.
    pub by: String,
    /// Why.
    pub why: String,
}

/// A job resumed: the ticks from `paused_since` to `resumed_at` were paused over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The job.
    pub job: String,
    /// The node it was paused on, or `None`: every node.
    pub node: Option<String>,
    /// When the pause began.
    pub paused_since: DateTime<Utc>,
    /// When it ended.
    pub resumed_at: DateTime<Utc>,
    /// Whether the ticks paused over are caught up, as the job's catch-up policy says.
    pub catch_up: bool,
    /// The control version that recorded it (instances apply each resume once).
    pub version: i64,
}

/// The id of a triggered run: what a caller follows ([`Controls::trigger_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TriggerId(pub i64);

impl fmt::Display for TriggerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a triggered run stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TriggerState {
    /// Asked for; no instance has claimed it yet.
    Pending,
    /// Claimed: `holder` holds the job's lease for it.
    Running {
        /// The lease's holder.
        holder: Holder,
        /// When the run began (store clock).
        started_at: DateTime<Utc>,
    },
    /// Ended with `outcome` (how its run ended; [`Outcome::Skipped`] when the overlap
    /// policy refused it), and the error's text if it failed.
    Done {
        /// The run's outcome ([`Outcome::Unknown`] for a word a newer version stored).
        outcome: Outcome,
        /// The error, if it failed.
        error: Option<String>,
        /// When it ended (store clock).
        finished_at: DateTime<Utc>,
    },
}

/// A triggered run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    /// Its id.
    pub id: TriggerId,
    /// The job.
    pub job: String,
    /// The node it runs on (a node-scoped job), or `None`: any instance.
    pub node: Option<String>,
    /// When it was asked for (store clock): the run's tick.
    pub requested_at: DateTime<Utc>,
    /// Who asked.
    pub by: String,
    /// Why.
    pub why: String,
    /// Where it stands.
    pub state: TriggerState,
}

/// What changed since a control version: what an instance polls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlState {
    /// The store's control version now.
    pub version: i64,
    /// Every pause in force (all of them, not only the new ones).
    pub paused: Vec<Pause>,
    /// Resumes recorded after the version asked about.
    pub resumed: Vec<Resume>,
    /// Triggers not yet done (pending, or running), oldest first.
    pub triggers: Vec<Trigger>,
    /// Dynamic schedules changed after the version asked about, removed ones
    /// included ([`ScheduleRow::removed`]); every live schedule (no tombstones)
    /// when asked about no version.
    pub schedules: Vec<ScheduleRow>,
}

/// What a store's [watch of the controls](Controls::watch) says.
///
/// The rule a store keeps: **a poll that begins after `changes` moved sees every
/// change announced up to that move**, and while `live` every change of the control
/// version moves `changes`. So a store bumps `changes` for each change it learns of,
/// and once more each time it (re)starts listening (changes made while it was not
/// listening may not have been announced).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlSignal {
    /// Whether every change is announced now. `false` while the store is not
    /// listening (a listener connection down): the runtime then polls on its timer.
    pub live: bool,
    /// How many times the store announced a change, or started listening.
    pub changes: u64,
}
