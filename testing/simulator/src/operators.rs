//! The operators' hands on the cluster: pause and resume (with or without a
//! catch-up, everywhere or per node), trigger now, dynamic schedules put, changed
//! and removed, and backfills of a past range on one instance.

use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_core::{BackfillOptions, ControlRequest, Controls, ScheduleRow, Scope};

use crate::cluster::{Cluster, stallable};
use crate::world::{Backfill, JobModel, PauseSpan, lock};

impl Cluster {
    /// Pauses `job` (on `node`, or everywhere).
    pub(crate) async fn pause(&mut self, job: &str, node: Option<&str>) {
        let open = self.world().pauses.iter().any(|p| {
            p.job == job && p.to.is_none() && (p.node.is_none() || p.node.as_deref() == node)
        });
        if open {
            return;
        }
        let mut req = ControlRequest::new(job, "simulator");
        if let Some(node) = node {
            req = req.node(node);
        }
        if let Ok(record) = self.store.pause(&req).await {
            let mut w = self.world();
            w.note(record.at, format!("operator pauses {job} on {node:?}"));
            w.events.push(record.at);
            w.pauses.push(PauseSpan {
                job: job.to_owned(),
                node: node.map(str::to_owned),
                from: record.at,
                to: None,
                catch_up: false,
            });
        }
    }

    /// Resumes every open pause of `job` (with or without catch-up).
    pub(crate) async fn resume(&mut self, job: &str, catch_up: bool) {
        let open: Vec<Option<String>> = self
            .world()
            .pauses
            .iter()
            .filter(|p| p.job == job && p.to.is_none())
            .map(|p| p.node.clone())
            .collect();
        for node in open {
            let mut req = ControlRequest::new(job, "simulator");
            if let Some(node) = &node {
                req = req.node(node.clone());
            }
            if let Ok(record) = self.store.resume(&req, catch_up).await {
                let mut w = self.world();
                w.note(
                    record.at,
                    format!("operator resumes {job} on {node:?}, catch-up {catch_up}"),
                );
                w.events.push(record.at);
                if let Some(p) = w
                    .pauses
                    .iter_mut()
                    .find(|p| p.job == job && p.node == node && p.to.is_none())
                {
                    p.to = Some(record.at);
                    p.catch_up = catch_up;
                }
            }
        }
    }

    /// Asks for one run of `job` now (off the whole second, and off the instant of
    /// another trigger of the job: a trigger's run has the instant it was asked for
    /// as its tick, which the model must tell apart from the job's own ticks and
    /// from the other triggers' runs).
    pub(crate) async fn trigger(&mut self, job: &str) {
        loop {
            let now = self.now();
            let taken = now.timestamp_subsec_millis() == 0
                || self
                    .world()
                    .triggers
                    .iter()
                    .any(|(j, at)| j == job && *at == now);
            if !taken {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if let Ok(t) = self
            .store
            // Paused or not: an operator who triggers a paused job says so.
            .trigger(&ControlRequest::new(job, "simulator").while_paused(true))
            .await
        {
            let mut w = self.world();
            w.note(
                t.requested_at,
                format!("operator triggers {job} (#{})", t.id),
            );
            w.events.push(t.requested_at);
            w.triggers.push((job.to_owned(), t.requested_at));
        }
    }

    /// Puts dynamic schedule `d` (every `every_s` seconds, under `policy`): a new
    /// schedule, or a change of the one there.
    pub(crate) async fn put_schedule(&mut self, d: usize, every_s: u64, policy: &str) {
        let spec = self.setup.dynamic[d].clone();
        let every_s = every_s * self.setup.every_scale;
        let mut row = ScheduleRow::new(spec.name.clone(), "sim", format!("every {every_s}s"));
        row.scope = spec.scope;
        row.policy = policy.to_owned();
        let Ok(record) = self.store.put_schedule(&row, "simulator", "extras").await else {
            return;
        };
        let mut w = self.world();
        w.note(
            record.at,
            format!(
                "operator puts {} every {every_s}s, policy {policy:?}",
                spec.name
            ),
        );
        w.events.push(record.at);
        w.puts.push((spec.name.clone(), record.at));
        close(&mut w.jobs, &spec.name, record.at);
        for removal in &mut w.removals {
            if removal.0 == spec.name && removal.2.is_none() {
                removal.2 = Some(record.at);
            }
        }
        w.jobs.push(JobModel {
            name: spec.name.clone(),
            node_scoped: spec.scope == Scope::Node,
            every: Duration::from_secs(every_s),
            active: Some((record.at, None)),
        });
    }

    /// Removes dynamic schedule `d`.
    pub(crate) async fn remove_schedule(&mut self, d: usize) {
        let name = self.setup.dynamic[d].name.clone();
        let Ok(Some(record)) = self
            .store
            .remove_schedule(&name, "simulator", "extras")
            .await
        else {
            return;
        };
        let mut w = self.world();
        w.note(record.at, format!("operator removes {name}"));
        w.events.push(record.at);
        close(&mut w.jobs, &name, record.at);
        w.removals.push((name, record.at, None));
    }

    /// Backfills job `j` on instance `i`, from `back + len` to `back` before now
    /// (milliseconds), if the instance is up.
    pub(crate) fn backfill(&mut self, i: usize, j: usize, back: u64, len: u64) {
        if !self.is_up(i) {
            return;
        }
        let Some(backfiller) = self.instances[i].backfiller.clone() else {
            return;
        };
        let now = self.now();
        let to = now - chrono::TimeDelta::milliseconds(i64::try_from(back).unwrap_or(0));
        let from = to - chrono::TimeDelta::milliseconds(i64::try_from(len).unwrap_or(0));
        let spec = self.setup.jobs[j].clone();
        let job = match spec.scope {
            Scope::Node => format!("{}:{}", spec.name, self.setup.nodes[i]),
            _ => spec.name.clone(),
        };
        {
            let mut w = self.world();
            w.note(
                now,
                format!("operator backfills {job} on i{i} from {from:?} to {to:?}"),
            );
            w.events.push(now);
            w.backfills.push(Backfill {
                job: job.clone(),
                from,
                to,
                asked: now,
            });
        }
        let (world, store) = (self.world.clone(), self.store.clone());
        let faults = self.instances[i].faults.clone();
        let task = tokio::spawn(async move {
            let options = BackfillOptions::default().concurrency(2);
            let run = async {
                let result = backfiller.backfill(&spec.name, from, to, options).await;
                let now = store.clock().now();
                let mut w = lock(&world);
                match result {
                    Ok(report) => w.backfill_returned(&job, spec.every, (from, to), &report, now),
                    Err(err) => w.note(now, format!("backfill of {job} on i{i} failed: {err}")),
                }
            };
            stallable(run, &faults).await;
        });
        self.instances[i].backfills.push(task);
    }
}

/// Ends the span of dynamic schedule `name`'s version, at `at`.
fn close(jobs: &mut [JobModel], name: &str, at: DateTime<Utc>) {
    for job in jobs {
        if job.name == name && job.active.is_some_and(|(_, to)| to.is_none()) {
            job.active = job.active.map(|(from, _)| (from, Some(at)));
        }
    }
}
