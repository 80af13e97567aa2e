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

impl LeaseRow {
    /// The job whose lease this is, as [`LeaseName::for_job`] named it: the name up
    /// to its first unescaped `:` (a node lease's node) or `\#`, `\@` (a lease
    /// slot's number, a backfilled tick's), with `\\` and `\:` unescaped.
    ///
    /// [`LeaseName::for_job`]: crate::LeaseName::for_job
    pub fn job(&self) -> String {
        let mut job = String::with_capacity(self.name.len());
        let mut chars = self.name.chars();
        while let Some(c) = chars.next() {
            match c {
                ':' => break,
                '\\' => match chars.next() {
                    Some(escaped @ ('\\' | ':')) => job.push(escaped),
                    // `\#slot`, `\@micros`: the job's name has ended.
                    _ => break,
                },
                c => job.push(c),
            }
        }
        job
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leases_job_is_its_name_before_node_slot_or_tick() {
        let row = |name: &str| LeaseRow {
            name: name.to_owned(),
            holder: None,
            tick: DateTime::UNIX_EPOCH,
            token: 1,
            expires_at: DateTime::UNIX_EPOCH,
            released_at: None,
        };
        for (name, job) in [
            ("sweep", "sweep"),
            ("uptime:node-a", "uptime"),
            ("report\\:eu", "report:eu"),
            ("report\\:eu:node\\:1", "report:eu"),
            ("a\\\\b", "a\\b"),
            ("sweep\\#2", "sweep"),
            ("uptime:node-a\\#1", "uptime"),
            ("sweep\\@1790000000000000", "sweep"),
        ] {
            assert_eq!(row(name).job(), job, "{name}");
        }
    }
}
