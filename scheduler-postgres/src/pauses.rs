//! [`Pauses`]: the pauses a take must honour, known to the store, so that a take
//! does not read the controls table.
//!
//! A take refuses a request whose job is paused (everywhere or on the asking node),
//! or whose tick a resume's catch-up runs. Read in the take itself, that is a probe
//! of the controls table per request, and every take then waits on any lock of that
//! table: an `ALTER TABLE`, a `VACUUM FULL` or a `pg_repack` of it held every job,
//! paused or not. So the store keeps the rows that can refuse a take (paused, or
//! ended with a catch-up), read in one statement with the control version they are
//! current at. A take decides each request's pause from them and sends the version
//! along; the statement reads only the version row, and takes nothing unless the
//! version is still the same in its snapshot. Every control bumps that version in
//! the statement that writes its row, so an equal version means the same rows: the
//! decision is the one a probe in that snapshot would have made.
//!
//! So are the triggered runs that keep a completion (their claim took the lease
//! from a completed tick): a take counts their rows' ticks completed, and reads
//! them from here instead of from the triggers table (claims and finishes bump the
//! version too).
//!
//! When the version moved (a control since), or nothing is known yet, the take
//! probes the controls table as before, and the rows are read again on a task of
//! its own: a lock of the controls table then holds up that read, not the takes
//! that follow it with the version unchanged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, SubsecRound, Utc};
use scheduler_core::ControlKey;

use crate::error::Result;
use crate::row::{get, optional_time};
use crate::session::Session;

/// How long after a failed read of the pauses it is tried again.
const READ_RETRY: Duration = Duration::from_secs(5);

/// The rows that can refuse a take, as of one control version.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// The control version they are current at.
    pub(crate) version: i64,
    /// By job: the node (`''`: everywhere) and the row.
    rows: HashMap<String, Vec<(String, Row)>>,
    /// The leases and holders of the triggered runs that keep a completion for their
    /// finish to put back: a take counts their rows' ticks completed.
    pub(crate) claims: (Vec<String>, Vec<String>),
}

/// One row of the controls table that can refuse a take.
#[derive(Debug, Clone)]
struct Row {
    paused: bool,
    since: Option<DateTime<Utc>>,
    resumed_at: Option<DateTime<Utc>>,
    catch_up: bool,
}

impl Known {
    /// Whether a take for `key` at `tick` is refused as paused: as the take's probe
    /// decides it (the job paused everywhere or on the node, or, for a tick a
    /// resume's catch-up runs, within a pause that ended with a catch-up).
    pub(crate) fn paused(&self, key: &ControlKey, tick: DateTime<Utc>) -> bool {
        // The database compares microseconds.
        let tick = tick.trunc_subsecs(6);
        let Some(rows) = self.rows.get(&*key.job) else {
            return false;
        };
        rows.iter()
            .filter(|(node, _)| node.is_empty() || **node == *key.node)
            .any(|(_, row)| {
                row.paused
                    || (key.caught_up_on_resume
                        && row.catch_up
                        && row.since.is_some_and(|since| since <= tick)
                        && row.resumed_at.is_some_and(|resumed| tick <= resumed))
            })
    }
}

/// What the store knows of the pauses, shared by its clones.
#[derive(Debug)]
pub(crate) struct Pauses {
    known: Mutex<Option<Arc<Known>>>,
    /// Whether a read is under way.
    reading: AtomicBool,
    /// Not before this instant is a read tried again after one failed (a role
    /// without `SELECT` on the version table, a lock): the takes probe meanwhile.
    retry_at: Mutex<Option<Instant>>,
    /// The read: the version, and every row that can refuse a take.
    read: String,
}

impl Pauses {
    /// Nothing known yet; `version`, `controls` and `triggers` are the quoted tables.
    pub(crate) fn new(version: &str, controls: &str, triggers: &str) -> Self {
        Self {
            known: Mutex::new(None),
            reading: AtomicBool::new(false),
            retry_at: Mutex::new(None),
            // One statement, so one snapshot: the rows are those of the version read.
            read: format!(
                "SELECT v.version, c.job, c.node, c.paused, c.since, c.resumed_at, \
                        c.catch_up IS TRUE AS catch_up, NULL::text AS lease, NULL::text AS holder \
                 FROM {version} v LEFT JOIN {controls} c ON c.paused OR c.catch_up \
                 WHERE v.id = 1 \
                 UNION ALL \
                 SELECT v.version, NULL, NULL, NULL, NULL, NULL, false, tg.lease, tg.holder \
                 FROM {version} v JOIN {triggers} tg \
                   ON tg.state <> 'done' AND tg.state = 'running' \
                  AND tg.prev_released_at IS NOT NULL \
                 WHERE v.id = 1"
            ),
        }
    }

    /// What is known, if anything.
    pub(crate) fn known(&self) -> Option<Arc<Known>> {
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What is known is not current (a take found the version at `seen`): it is
    /// forgotten, and read again on a task of its own, unless a read is under way.
    pub(crate) fn stale(self: &Arc<Self>, session: &Session, seen: Option<i64>) {
        {
            let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            if known
                .as_ref()
                .is_some_and(|k| seen.is_none_or(|seen| k.version != seen))
            {
                *known = None;
            }
        }
        let waiting = self
            .retry_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| Instant::now() < at);
        if waiting || self.reading.swap(true, Ordering::AcqRel) {
            return;
        }
        let (pauses, session) = (self.clone(), session.clone());
        tokio::spawn(async move {
            match pauses.read(&session).await {
                Ok(read) => {
                    *pauses.known.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(Arc::new(read));
                }
                Err(err) => {
                    *pauses
                        .retry_at
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) =
                        Some(Instant::now() + READ_RETRY);
                    tracing::debug!(error = %err, retry_in = ?READ_RETRY,
                        "reading the pauses failed; takes probe the controls table meanwhile");
                }
            }
            pauses.reading.store(false, Ordering::Release);
        });
    }

    async fn read(&self, session: &Session) -> Result<Known> {
        const OPERATION: &str = "read the pauses";
        let rows = session
            .query_pooled(OPERATION, &self.read, Vec::new())
            .await?;
        let mut known = Known::default();
        for row in &rows {
            known.version = get(row, "version", OPERATION)?;
            if let Some(lease) = get::<Option<String>>(row, "lease", OPERATION)? {
                let holder = get::<Option<String>>(row, "holder", OPERATION)?;
                known.claims.0.push(lease);
                known.claims.1.push(holder.unwrap_or_default());
                continue;
            }
            let Some(job) = get::<Option<String>>(row, "job", OPERATION)? else {
                continue;
            };
            let node = get::<Option<String>>(row, "node", OPERATION)?.unwrap_or_default();
            let read = Row {
                paused: get::<Option<bool>>(row, "paused", OPERATION)?.unwrap_or(false),
                since: optional_time(row, "since", OPERATION)?,
                resumed_at: optional_time(row, "resumed_at", OPERATION)?,
                catch_up: get(row, "catch_up", OPERATION)?,
            };
            known.rows.entry(job).or_default().push((node, read));
        }
        Ok(known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(job: &str, node: &str, caught_up: bool) -> ControlKey {
        ControlKey {
            job: job.into(),
            node: node.into(),
            caught_up_on_resume: caught_up,
        }
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap_or_default()
    }

    #[test]
    fn a_take_is_refused_as_the_probe_would() {
        let mut known = Known::default();
        let paused = Row {
            paused: true,
            since: Some(at(10)),
            resumed_at: None,
            catch_up: false,
        };
        let caught_up = Row {
            paused: false,
            since: Some(at(100)),
            resumed_at: Some(at(200)),
            catch_up: true,
        };
        known
            .rows
            .insert("everywhere".into(), vec![(String::new(), paused.clone())]);
        known.rows.insert("on-a".into(), vec![("a".into(), paused)]);
        known
            .rows
            .insert("resumed".into(), vec![(String::new(), caught_up)]);
        assert!(known.paused(&key("everywhere", "b", false), at(5)));
        assert!(known.paused(&key("on-a", "a", false), at(5)));
        assert!(
            !known.paused(&key("on-a", "b", false), at(5)),
            "another node"
        );
        assert!(
            !known.paused(&key("other", "a", false), at(5)),
            "not paused"
        );
        // Within the resumed pause only for a tick the catch-up runs, ends included.
        assert!(known.paused(&key("resumed", "a", true), at(100)));
        assert!(known.paused(&key("resumed", "a", true), at(200)));
        assert!(!known.paused(&key("resumed", "a", true), at(201)));
        assert!(!known.paused(&key("resumed", "a", false), at(150)));
    }
}
