//! This instance's heartbeat ([`Controls::heartbeat`](crate::Controls::heartbeat)):
//! one write at the first control turn (beside the registration of its jobs and
//! handlers), then one every [`heartbeat`](crate::SchedulerBuilder::heartbeat)
//! interval, never one per tick; and, at shutdown, its row marked stopped.
//!
//! Through the controls' gate, as every other control call: a beat that fails (or is
//! not answered in time) is logged and tried again after a backoff no longer than
//! the interval, and never holds up the loop longer than any other call. A backfill's
//! own loop (no scheduler) never beats: the node's instance is the scheduler's.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::control::Heartbeat;
use crate::runtime::calls::Retry;
use crate::runtime::engine::Engine;

/// The heartbeat's state on the loop.
pub(in crate::runtime::engine) struct Beats {
    every: Duration,
    version: Arc<str>,
    /// When the next beat is due.
    pub(in crate::runtime::engine) next: Instant,
    /// When this instance started, on the store's clock (fixed at the first beat).
    started_at: Option<DateTime<Utc>>,
    /// The backoff after a failed beat.
    retry: Retry,
    /// Whether the last beat failed (the first failure of a streak is a warning).
    failing: bool,
}

impl Beats {
    pub(in crate::runtime::engine) fn new(
        every: Duration,
        version: Arc<str>,
        retry: Retry,
    ) -> Self {
        Self {
            every,
            version,
            next: Instant::now(),
            started_at: None,
            retry,
            failing: false,
        }
    }
}

impl Engine {
    /// Sends the heartbeat when it is due.
    pub(in crate::runtime::engine) async fn heartbeat_turn(&mut self) {
        if self.standalone {
            return;
        }
        let db_now = self.db_now();
        let node = self.s.node.to_string();
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        let sent = Instant::now();
        if sent < ctl.beats.next {
            return;
        }
        let started = ctl.started.unwrap_or(db_now);
        let beats = &mut ctl.beats;
        let beat = Heartbeat {
            node,
            version: beats.version.to_string(),
            started_at: *beats.started_at.get_or_insert(started),
            every: beats.every,
        };
        let store = self.s.store.clone();
        let call = async move {
            match store.controls() {
                Some(c) => c.heartbeat(&beat).await,
                None => Ok(()),
            }
        };
        let result = ctl.gate.run("heartbeat", call).await;
        let beats = &mut ctl.beats;
        match result {
            Ok(()) => {
                beats.retry.ok();
                beats.failing = false;
                beats.next = (sent + beats.every).max(Instant::now());
                // After the beat, the live instances, to spread the dynamic schedules
                // over (a failed read keeps the spread as it was); an instance with
                // no handler runs none.
                if self.s.handlers.is_empty() {
                    return;
                }
                let store = self.s.store.clone();
                let call = async move {
                    match store.controls() {
                        Some(c) => c.instances().await,
                        None => Ok(Vec::new()),
                    }
                };
                match ctl.gate.run("read the live instances", call).await {
                    Ok(rows) => self.on_instances(&rows),
                    Err(err) => debug!(error = %err, "reading the live instances failed"),
                }
            }
            Err(err) => {
                let delay = beats.retry.failed(beats.every);
                beats.next = Instant::now() + delay;
                if std::mem::replace(&mut beats.failing, true) {
                    debug!(error = %err, retry_in = ?delay, "the heartbeat failed again");
                } else {
                    warn!(error = %err, retry_in = ?delay,
                        "recording this instance's heartbeat failed; retrying (its jobs run all the same, but operators may see it as gone)");
                }
            }
        }
    }

    /// Marks this instance's row stopped, at the end of the drain: best effort, one
    /// try through the gate (a failure is logged; the row then expires on its own).
    pub(in crate::runtime::engine) async fn say_stopped(&mut self) {
        if self.standalone {
            return;
        }
        let Some(ctl) = &self.ctl else {
            return;
        };
        let (store, node) = (self.s.store.clone(), self.s.node.to_string());
        let call = async move {
            match store.controls() {
                Some(c) => c.stopped(&node).await,
                None => Ok(()),
            }
        };
        if let Err(err) = ctl.gate.run("record the instance stopped", call).await {
            warn!(error = %err, "recording this instance stopped failed; its row expires on its own");
        }
    }
}
