//! Triggers, as the loop meets them: claimed for an idle entry of their job, run
//! like a tick's run, their ends recorded with the trigger; a trigger the job's
//! lease refuses waits as the decision core says ([`on_trigger_refused`]).

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::super::Engine;
use crate::control::{Trigger, TriggerId, TriggerState};
use crate::error::Error;
use crate::lease::{Holder, Lease, Tick};
use crate::outcome::Outcome;
use crate::runtime::decide::{TriggerRefused, claimed_elsewhere, on_trigger_refused};

impl Engine {
    /// Whether this instance runs (or ran) trigger `t`.
    pub(in crate::runtime::engine) fn runs_trigger(&self, t: &Trigger) -> bool {
        self.ctl
            .as_ref()
            .is_some_and(|c| c.ran_here.contains(&t.id))
            || self.entries_of(&t.job).into_iter().any(|i| {
                self.jobs[i]
                    .running()
                    .is_some_and(|r| r.trigger == Some(t.id))
            })
    }

    /// Claims each waiting trigger for an idle entry of its job; a trigger the
    /// job's lease refuses (the job runs, here or elsewhere) waits as the job's
    /// overlap policy says: skipped, or asked again at the next poll (a running
    /// run asked to stop first, for "cancel running").
    pub(in crate::runtime::engine) async fn claim_triggers(&mut self) {
        // A run of this instance that ended holds its lease until its release goes
        // out: sent first (unless releases are backing off after a failure), so
        // that a trigger made meanwhile finds the lease free.
        let pending = self.ctl.as_ref().is_some_and(|c| {
            c.waiting
                .iter()
                .any(|t| matches!(t.state, TriggerState::Pending))
        });
        if pending && self.releases_due(true) {
            self.flush_releases().await;
        }
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        let waiting = std::mem::take(&mut ctl.waiting);
        let gate = ctl.gate.clone();
        let mut keep = Vec::new();
        let now = self.db_now();
        let ttl = self.s.settings.ttl;
        let mut waiting = waiting.into_iter();
        while let Some(trigger) = waiting.next() {
            // Claimed elsewhere, and its lease cannot have expired yet.
            if claimed_elsewhere(&trigger.state, now, ttl.get()) {
                keep.push(trigger);
                continue;
            }
            let entries = self.entries_of(&trigger.job);
            let mut outcome = Claim::Refused;
            for &i in &entries {
                if self.jobs[i].running().is_some() {
                    continue;
                }
                let holder = Holder::generate_on(&self.s.holder_prefix);
                let (store, lease, id) = (
                    self.s.store.clone(),
                    self.s.entries[i].lease.clone(),
                    trigger.id,
                );
                let call = async move {
                    match store.controls() {
                        Some(c) => c.claim_trigger(id, &lease, &holder, ttl).await,
                        None => Err(Error::NoControls),
                    }
                };
                match gate.run("claim trigger", call).await {
                    Ok(Some(lease)) => {
                        outcome = Claim::Won(i, lease);
                        break;
                    }
                    Ok(None) => {}
                    Err(err) => {
                        warn!(trigger = %trigger.id, job = %trigger.job, error = %err,
                            "claiming a triggered run failed; retrying at the next poll");
                        outcome = Claim::Failed;
                        break;
                    }
                }
            }
            match outcome {
                Claim::Won(i, lease) => self.start_triggered(i, lease, &trigger),
                // The store fails: the rest wait for the next poll too, so a
                // failing controls table holds the loop up once per poll at most.
                Claim::Failed => {
                    keep.push(trigger);
                    keep.extend(waiting.by_ref());
                    break;
                }
                Claim::Refused => match entries.first() {
                    Some(&first) => self.trigger_refused(first, trigger, &mut keep).await,
                    None => keep.push(trigger),
                },
            }
        }
        if let Some(ctl) = &mut self.ctl {
            let still: HashSet<TriggerId> = keep.iter().map(|t| t.id).collect();
            ctl.refused_at.retain(|id, _| still.contains(id));
            ctl.waiting = keep;
        }
    }

    /// A trigger of entry `i`'s job whose lease is held: the job runs (here or
    /// elsewhere), or another instance claimed the trigger. It waits, is recorded
    /// skipped, or asks the run to stop, as the decision core says.
    async fn trigger_refused(&mut self, i: usize, trigger: Trigger, keep: &mut Vec<Trigger>) {
        let e = &self.s.entries[i];
        // A node-scoped job's trigger that names no node may run on any node: one
        // node's busy lease does not decide it.
        let any_node = trigger.node.is_none() && e.scope == crate::job::Scope::Node;
        let pending = matches!(trigger.state, TriggerState::Pending);
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        let now = Instant::now();
        let first = *ctl.refused_at.entry(trigger.id).or_insert(now);
        // The job's policy: a slot of a concurrent job has `Skip` of its own.
        match on_trigger_refused(e.job_policy.overlap, pending, any_node, now - first) {
            TriggerRefused::Wait { after } => {
                if let Some(after) = after {
                    ctl.next = ctl.next.min(now + after);
                }
                keep.push(trigger);
            }
            TriggerRefused::Skip => {
                let (store, id) = (self.s.store.clone(), trigger.id);
                let call = async move {
                    match store.controls() {
                        Some(c) => {
                            c.finish_trigger(
                                id,
                                None,
                                Outcome::Skipped,
                                Some("the job was running; its overlap policy skips a run asked for meanwhile"),
                            )
                            .await
                        }
                        None => Ok(false),
                    }
                };
                match ctl.gate.clone().run("finish trigger", call).await {
                    Ok(true) => info!(job = %e.name, trigger = %trigger.id,
                        "triggered run skipped: the job was running (overlap policy skip)"),
                    // Claimed elsewhere meanwhile: nothing to do.
                    Ok(false) => {}
                    Err(err) => {
                        warn!(trigger = %trigger.id, error = %err, "recording a skipped trigger failed; retrying");
                        keep.push(trigger);
                    }
                }
            }
            TriggerRefused::CancelRunning => {
                // Here, the run completes its tick however it ends, as for a newer
                // tick.
                if self.jobs[i].running().is_some_and(|r| r.trigger.is_none())
                    && let Some(r) = self.jobs[i].on_cancel_requested()
                {
                    info!(job = %e.name, tick = %r.lease.tick, trigger = %trigger.id,
                        "run cancelled: a triggered run asked for the lease (overlap policy cancel running)");
                }
                let lease = e.lease.clone();
                self.act(i, &mut Vec::new());
                self.to_cancel
                    .push((lease, Tick::new(trigger.requested_at)));
                keep.push(trigger);
            }
        }
    }

    /// Starts the run of `trigger` under `lease`, on entry `i`.
    fn start_triggered(&mut self, i: usize, mut lease: Lease, trigger: &Trigger) {
        let now = self.db_now();
        let holds_any = self.holds_any();
        let key = lease.key();
        // The run's tick is the trigger's own instant; the lease row keeps the
        // job's scheduled tick, untouched.
        lease.tick = Tick::new(trigger.requested_at);
        if !self.jobs[i].on_manual(lease, trigger.id, now) {
            // A run began meanwhile (cannot happen: claims are only made for idle
            // entries); hand the lease back as it was, interrupted, and leave the
            // trigger to be claimed again once its lease expires.
            warn!(trigger = %trigger.id, "a triggered run found its job running here; handing its lease back");
            self.to_release
                .push((key, crate::lease::Release::Interrupted));
            return;
        }
        if !holds_any {
            self.next_renew = Instant::now() + self.s.settings.renew_every;
        }
        if let Some(ctl) = &mut self.ctl {
            ctl.ran_here.insert(trigger.id);
        }
        let e = &self.s.entries[i];
        info!(job = %e.name, trigger = %trigger.id, by = %trigger.by, why = %trigger.why,
            "triggered run starting");
        self.s.observe.started(&e.name, Duration::ZERO);
        self.start_run(i, Duration::ZERO, Duration::ZERO);
    }

    /// Records the ends of triggered runs (kept for the next turn if the store
    /// fails), once the backoff of an earlier failure allows, or at once when
    /// `now_or_never` (the shutdown's last tries).
    pub(in crate::runtime::engine) async fn finish_triggers(&mut self, now_or_never: bool) {
        let Some(ctl) = &mut self.ctl else {
            return;
        };
        if ctl.to_finish.is_empty() || !(now_or_never || ctl.finish_retry.ready()) {
            return;
        }
        let gate = ctl.gate.clone();
        let mut finishes = std::mem::take(&mut ctl.to_finish).into_iter();
        let mut failed = Vec::new();
        while let Some(f) = finishes.next() {
            let store = self.s.store.clone();
            let (id, holder, outcome, error) = (f.id, f.holder.clone(), f.outcome, f.error.clone());
            let call = async move {
                match store.controls() {
                    Some(c) => {
                        c.finish_trigger(id, Some(&holder), outcome, error.as_deref())
                            .await
                    }
                    None => Ok(false),
                }
            };
            match gate.run("finish trigger", call).await {
                Ok(recorded) => {
                    debug!(trigger = %f.id, outcome = %f.outcome, recorded,
                        "triggered run recorded, its lease handed back");
                }
                Err(err) => {
                    warn!(trigger = %f.id, error = %err, "recording the end of a triggered run failed; retrying");
                    // The store failed: the rest wait for the retry too (a shutdown's
                    // tries each wait for at most one call's bound).
                    failed.push(f);
                    failed.extend(finishes.by_ref());
                }
            }
        }
        let cap = self.s.settings.retry_cap;
        if let Some(ctl) = &mut self.ctl {
            if failed.is_empty() {
                ctl.finish_retry.ok();
            } else {
                ctl.finish_retry.failed(cap);
            }
            ctl.to_finish.extend(failed);
        }
    }
}

/// What claiming a trigger came to.
enum Claim {
    Won(usize, Lease),
    Refused,
    Failed,
}
