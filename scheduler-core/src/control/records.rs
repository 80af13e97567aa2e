//! A control as asked for ([`ControlRequest`]) and as recorded ([`ControlRecord`]).

use std::fmt;

use chrono::{DateTime, Utc};

/// Who asked for a control, and why: a free-form actor string the app passes (a user
/// name, `cli:alice@host`, `web:admin`), and a reason, both kept in the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRequest {
    /// The job (a job registered in code, or a dynamic schedule's name).
    pub job: String,
    /// One node's scope only (a node-scoped job on that node), or `None`: every node.
    pub node: Option<String>,
    /// Who asked.
    pub by: String,
    /// Why (may be empty).
    pub why: String,
    /// A trigger only: run the job even if it is paused (everywhere, or on `node`),
    /// recorded as [`ControlAction::TriggerWhilePaused`]. Without it a trigger of a
    /// paused job is refused ([`Error::TriggerWhilePaused`](crate::Error::TriggerWhilePaused)).
    /// Default `false`.
    pub while_paused: bool,
}

impl ControlRequest {
    /// A request about `job`, asked by `by`, for every node, with no reason given.
    pub fn new(job: impl Into<String>, by: impl Into<String>) -> Self {
        Self {
            job: job.into(),
            node: None,
            by: by.into(),
            why: String::new(),
            while_paused: false,
        }
    }

    /// About node `node`'s scope only.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// With the reason `why`.
    pub fn why(mut self, why: impl Into<String>) -> Self {
        self.why = why.into();
        self
    }

    /// A trigger that runs the job even if it is paused ([`while_paused`](field@Self::while_paused)).
    pub fn while_paused(mut self, while_paused: bool) -> Self {
        self.while_paused = while_paused;
        self
    }
}

/// What a control did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ControlAction {
    /// The job was paused.
    Pause,
    /// The job was resumed; the ticks paused over are caught up.
    Resume,
    /// The job was resumed; the ticks paused over are dropped.
    ResumeWithoutCatchUp,
    /// One extra run was asked for.
    Trigger,
    /// One extra run of a paused job was asked for, as such
    /// ([`ControlRequest::while_paused`]).
    TriggerWhilePaused,
    /// A dynamic schedule was added or changed.
    SchedulePut,
    /// A dynamic schedule was removed.
    ScheduleRemove,
}

impl ControlAction {
    /// Every action.
    pub const ALL: [ControlAction; 7] = [
        ControlAction::Pause,
        ControlAction::Resume,
        ControlAction::ResumeWithoutCatchUp,
        ControlAction::Trigger,
        ControlAction::TriggerWhilePaused,
        ControlAction::SchedulePut,
        ControlAction::ScheduleRemove,
    ];

    /// The action's name as stored: `pause`, `resume`, `resume_no_catch_up`,
    /// `trigger`, `trigger_while_paused`, `schedule_put`, `schedule_remove`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlAction::Pause => "pause",
            ControlAction::Resume => "resume",
            ControlAction::ResumeWithoutCatchUp => "resume_no_catch_up",
            ControlAction::Trigger => "trigger",
            ControlAction::TriggerWhilePaused => "trigger_while_paused",
            ControlAction::SchedulePut => "schedule_put",
            ControlAction::ScheduleRemove => "schedule_remove",
        }
    }

    /// The action stored as `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl fmt::Display for ControlAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One control applied: the audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRecord {
    /// Its id, increasing in the order controls were applied.
    pub id: i64,
    /// When, on the store's clock.
    pub at: DateTime<Utc>,
    /// The job (or dynamic schedule).
    pub job: String,
    /// The node it was limited to, if any.
    pub node: Option<String>,
    /// What was done.
    pub action: ControlAction,
    /// Who asked.
    pub by: String,
    /// Why.
    pub why: String,
    /// What else the action carries: the trigger's id, the schedule's text.
    pub detail: String,
}
