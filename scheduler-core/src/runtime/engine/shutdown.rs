//! Graceful shutdown: the drain.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::{CANCEL_NOTICE, Engine};

impl Engine {
    /// Graceful shutdown: no new ticks; running jobs get the grace period (their
    /// leases still renewed, and the leases of runs that end released at once); the
    /// rest are cancelled; every lease is released. A second signal
    /// ([`shutdown_signal`](crate::shutdown_signal)) ends the grace period at once.
    pub(super) async fn drain(&mut self) {
        self.draining = true;
        let deadline = Instant::now() + self.s.settings.grace;
        let second_signal = crate::shutdown::second_signal();
        info!(running = self.tasks.len(), grace = ?self.s.settings.grace, "scheduler shutting down");
        while !self.tasks.is_empty() {
            if second_signal.is_cancelled() {
                info!(
                    running = self.tasks.len(),
                    "a second signal: not waiting for the running jobs"
                );
                break;
            }
            if self.releases_due(false) {
                self.flush_releases().await;
            }
            let mut wake = self.next_renew.min(deadline);
            if let Some(at) = self.release_wake() {
                wake = wake.min(at);
            }
            tokio::select! {
                biased;
                Some(done) = self.tasks.join_next() => {
                    self.finished(done);
                }
                () = second_signal.cancelled() => {}
                () = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= deadline {
                        break;
                    }
                    if Instant::now() >= self.next_renew {
                        self.renew().await;
                    }
                    self.expire_unrenewed();
                }
            }
        }
        // Past the grace period: cancel, give the runs a moment to notice, then abort.
        for (i, (job, e)) in self.jobs.iter_mut().zip(&self.s.entries).enumerate() {
            if let Some(running) = job.running() {
                warn!(job = %e.name, tick = %running.lease.tick, "cancelling the run at shutdown");
                job.on_cancelled();
                if let Some(h) = self.runs.get_mut(&i) {
                    h.cancel();
                }
            }
        }
        self.cancel_backfill_runs();
        // The runs still waiting for their instant go now, cancelled.
        self.tasks.hurry();
        let notice = tokio::time::sleep(CANCEL_NOTICE);
        tokio::pin!(notice);
        while !self.tasks.is_empty() {
            tokio::select! {
                biased;
                Some(done) = self.tasks.join_next() => {
                    self.finished(done);
                }
                () = &mut notice => break,
            }
        }
        self.tasks.abort_all();
        while let Some(done) = self.tasks.join_next().await {
            self.finished(done);
        }
        // Triggered runs' ends are recorded before their leases are released, with
        // as many quick tries as the releases get, whatever the backoff of an
        // earlier failure says: a triggered run whose end is not recorded is claimed
        // again once its claim could have expired, and runs again.
        for _ in 0..3 {
            self.finish_triggers(true).await;
            if self.ctl.as_ref().is_none_or(|c| c.to_finish.is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Release everything in (at most) one call per kind; a few quick retries, then
        // leave the rest to expire.
        for _ in 0..3 {
            self.release.at = None;
            self.flush_releases().await;
            if self.to_release.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.settle_backfills();
        self.hand_back_backfills();
        self.say_stopped().await;
        info!(unreleased = self.to_release.len(), "scheduler stopped");
    }
}
