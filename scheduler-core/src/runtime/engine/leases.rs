//! The loop's lease calls besides the takes: renewals (on their own clock, only
//! while a lease is held), releases (coalesced while runs keep ending, always sent
//! before a take), and what a lease lost means.

use std::collections::{HashMap, HashSet};

use tokio::time::Instant;
use tracing::{info, warn};

use super::{CLOCK_STALE, Engine};
use crate::lease::{FencingToken, LeaseKey, Release, Tick};
use crate::outcome::Outcome;

impl Engine {
    /// Whether to send the queued releases now: once they have lingered (for more
    /// runs to end and join them), or at once when a take follows; never during the
    /// release's backoff.
    pub(super) fn releases_due(&mut self, take_follows: bool) -> bool {
        self.note_releases();
        match self.lingered() {
            None => false,
            Some(at) => self.release.ready() && (take_follows || Instant::now() >= at),
        }
    }

    /// Notes when the queue of releases started and when it last grew.
    pub(super) fn note_releases(&mut self) {
        let len = self.to_release.len();
        if len == 0 {
            self.release_since = None;
        } else if len > self.release_grew.1 || self.release_since.is_none() {
            let now = Instant::now();
            self.release_since.get_or_insert(now);
            self.release_grew.0 = now;
        }
        self.release_grew.1 = len;
    }

    /// When the queued releases have lingered long enough: no release joined them
    /// for [`RELEASE_QUIET`], or [`RELEASE_LINGER`] after the first.
    pub(super) fn lingered(&self) -> Option<Instant> {
        let since = self.release_since?;
        Some((self.release_grew.0 + self.release_quiet).min(since + self.release_linger))
    }

    /// When the queued releases are next due (see [`Engine::releases_due`]).
    pub(super) fn release_wake(&self) -> Option<Instant> {
        if self.to_release.is_empty() {
            return None;
        }
        let lingered = self.lingered().unwrap_or_else(Instant::now);
        Some(self.release.at.map_or(lingered, |at| at.max(lingered)))
    }

    /// Sends the queued releases, one call per kind and round. A batch names each
    /// lease once (a store refuses a batch that names one twice), so releases of two
    /// holders of one lease (a run whose release failed, and a later run of the same
    /// job) go in successive rounds.
    pub(super) async fn flush_releases(&mut self) {
        while !self.to_release.is_empty() {
            for how in [Release::Completed, Release::Interrupted] {
                let kind = self.to_release.iter().filter(|(_, h)| *h == how).count();
                if kind == 0 {
                    continue;
                }
                let mut names = HashSet::with_capacity(kind);
                let batch: Vec<usize> = (0..self.to_release.len())
                    .filter(|&k| {
                        let (key, h) = &self.to_release[k];
                        *h == how && names.insert(key.name.clone())
                    })
                    .collect();
                let keys: Vec<LeaseKey> = batch
                    .iter()
                    .map(|&k| self.to_release[k].0.clone())
                    .collect();
                let store = self.s.store.clone();
                let call = async move { store.release(&keys, how).await };
                match self.leases.run("release", call).await {
                    Ok(_) => {
                        for k in batch.into_iter().rev() {
                            self.to_release.swap_remove(k);
                        }
                        self.release.ok();
                        self.store_ok();
                    }
                    Err(err) => {
                        let delay = self.release.failed(self.s.settings.retry_cap);
                        self.store_failed("releasing leases", &err, delay);
                        return;
                    }
                }
            }
        }
    }

    /// Renews every lease this instance holds in one call; a lease not renewed is lost. Runs on its
    /// own clock (every renewal interval, sooner after a failure), whatever the takes
    /// are doing.
    pub(super) async fn renew(&mut self) {
        let renew_every = self.s.settings.renew_every;
        if self.sampled.elapsed() >= CLOCK_STALE {
            self.sync_clock().await;
        }
        let ours: Vec<(usize, LeaseKey)> = (self.jobs.running().into_iter())
            .filter_map(|i| {
                let r = self.jobs[i].running().filter(|r| !r.lost)?;
                Some((i, r.lease.key()))
            })
            .collect();
        // Triggered runs that ended but whose end is not recorded yet keep their
        // leases until it is.
        let finishing: Vec<LeaseKey> = self.ctl.as_ref().map_or_else(Vec::new, |c| {
            c.to_finish
                .iter()
                .filter(|f| !ours.iter().any(|(_, k)| k.name == f.lease))
                .map(|f| LeaseKey {
                    name: f.lease.clone(),
                    holder: f.holder.clone(),
                })
                .collect()
        });
        let backfilled = self.backfill_keys();
        if ours.is_empty() && finishing.is_empty() && backfilled.is_empty() {
            self.next_renew = Instant::now() + renew_every;
            return;
        }
        let keys: Vec<LeaseKey> = ours
            .iter()
            .map(|(_, k)| k.clone())
            .chain(finishing)
            .chain(backfilled.iter().map(|(_, k)| k.clone()))
            .collect();
        let asked = keys.len();
        let (store, ttl) = (self.s.store.clone(), self.s.settings.ttl);
        let call = async move { store.renew(&keys, ttl).await };
        let result = self.leases.run("renew", call).await;
        match result {
            Ok(renewed) => {
                self.s
                    .observe
                    .renewals(renewed.len(), asked.saturating_sub(renewed.len()));
                self.renew_fails.reset();
                self.store_ok();
                self.next_renew = Instant::now() + renew_every;
                let renewed: HashMap<_, _> = renewed
                    .into_iter()
                    .map(|r| (r.name, (r.expires_at, r.cancel_requested)))
                    .collect();
                for (i, key) in ours {
                    match renewed.get(&key.name) {
                        Some((expires_at, cancel)) => {
                            self.jobs.keyed_mut(i).on_renewed(*expires_at);
                            self.tell_expiry(i);
                            if *cancel && let Some(r) = self.jobs[i].on_cancel_requested() {
                                info!(job = %self.s.entries[i].name, tick = %r.lease.tick,
                                    "run cancelled: a newer tick of the job asked for the lease");
                                self.act(i, &mut Vec::new());
                            }
                        }
                        None => self.lost(i, "the renewal found the lease taken over or gone"),
                    }
                }
                for (run, key) in backfilled {
                    let expires_at = renewed.get(&key.name).map(|(at, _)| *at);
                    self.backfill_renewed(run, expires_at);
                }
            }
            Err(err) => {
                // Retried well before the leases expire: within half an interval.
                let delay = self.renew_fails.next_delay().min(renew_every / 2);
                self.next_renew = Instant::now() + delay;
                self.store_failed("renewing leases", &err, delay);
            }
        }
    }

    /// A lease whose expiry passed without a renewal (the store unreachable) is lost:
    /// another instance may take it now.
    ///
    /// The running jobs are looked at only when a lease may have expired (the
    /// jobs' expiry floor has passed), or when a fenced run's task may have
    /// cancelled it at its expiry: not at every turn of 10,000 runs.
    pub(super) fn expire_unrenewed(&mut self) {
        let now = self.db_now();
        let may_expire = self.jobs.expiry_floor().is_some_and(|at| at <= now);
        if !may_expire && self.runs.fenced() == 0 {
            return;
        }
        for i in self.jobs.running() {
            self.note_expired(i);
            if self.jobs[i].expired_unrenewed(now) {
                self.lost(i, "the lease expired before it could be renewed");
            }
        }
        self.jobs.settle_expiry_floor();
    }

    /// Job `i`'s run lost its lease (`why`).
    pub(super) fn lost(&mut self, i: usize, why: &str) {
        let fenced = self.s.entries[i].cadence.fenced;
        if let Some(r) = self.jobs[i].on_lost(fenced) {
            let lease = (r.lease.tick, r.lease.token);
            self.report_lost(i, why, lease);
        }
    }

    /// Logs and counts the loss of job `i`'s lease, and carries out what the
    /// decisions said (cancel the run, or an attempt not begun).
    pub(super) fn report_lost(&mut self, i: usize, why: &str, (tick, token): (Tick, FencingToken)) {
        let e = &self.s.entries[i];
        self.s.observe.outcome(&e.name, Outcome::LeaseLost);
        if e.cadence.fenced {
            warn!(job = %e.name, tick = %tick, token = %token, reason = why,
                "lease lost: cancelling the run (the job needs fencing)");
        } else {
            warn!(job = %e.name, tick = %tick, reason = why,
                "lease lost: the run goes on (a duplicate is harmless for this job)");
        }
        self.act(i, &mut Vec::new());
    }
}
