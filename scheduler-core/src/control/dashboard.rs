//! What a dashboard reads besides the controls: pages of the run history
//! ([`Page`], [`RunRow`]) and the leases ([`LeaseRow`]).

use chrono::{DateTime, Utc};

use crate::outcome::Outcome;

/// A page of a history: the records before `before` (an id; `None`: the newest),
/// at most `limit` of them, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Only records with an id below this.
    pub before: Option<i64>,
    /// At most this many.
    pub limit: u32,
}

impl Default for Page {
    fn default() -> Self {
        Self {
            before: None,
            limit: 50,
        }
    }
}

/// A finished run, as a run history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    /// Its id in the history, increasing.
    pub id: i64,
    /// The job.
    pub job: String,
    /// The tick it ran for.
    pub tick: DateTime<Utc>,
    /// The node that ran it.
    pub node: String,
    /// Its fencing token.
    pub token: i64,
    /// When it began and ended (store clock).
    pub started: DateTime<Utc>,
    /// When it ended.
    pub finished: DateTime<Utc>,
    /// How it ended ([`Outcome::Unknown`] for a word a newer version stored).
    pub outcome: Outcome,
    /// The error's text, if it failed.
    pub error: Option<String>,
    /// Which attempt (1 unless retried).
    pub attempt: u32,
}

/// A lease as the store keeps it (for a dashboard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// The lease's name.
    pub name: String,
    /// Its holder (`node:pid:random`), if it was ever held (`None` for the row
    /// [`Store::create_missing`](crate::Store::create_missing) made).
    pub holder: Option<String>,
    /// The tick it was last taken for.
    pub tick: DateTime<Utc>,
    /// Its fencing token.
    pub token: i64,
    /// When it expires (or expired).
    pub expires_at: DateTime<Utc>,
    /// When it was released, if it was.
    pub released_at: Option<DateTime<Utc>>,
}
