//! The cluster: N scheduler instances on one memory store, started, stalled,
//! killed, drained and restarted by the driver, with the operators' hands.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::{ControlRequest, Controls, LocalClock, MemoryStore, Scheduler};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::job::{SimJob, Spec};
use crate::store::{Faults, SimStore};
use crate::world::World;

/// How the cluster is set up (drawn from the seed).
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub(crate) seed: u64,
    pub(crate) ttl: Duration,
    pub(crate) control_poll: Option<Duration>,
    pub(crate) nodes: Vec<String>,
    pub(crate) skews_ms: Vec<i64>,
    pub(crate) jobs: Vec<Spec>,
}

/// One instance: its node, its current incarnation's faults and task.
#[derive(Debug)]
struct Instance {
    faults: Arc<Faults>,
    task: Option<JoinHandle<()>>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// The running cluster.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) setup: Setup,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) world: Arc<Mutex<World>>,
    instances: Vec<Instance>,
    /// Starts so far, all instances together.
    starts: usize,
}

impl Cluster {
    pub(crate) fn new(setup: Setup, store: Arc<MemoryStore>, world: Arc<Mutex<World>>) -> Self {
        let instances = setup
            .nodes
            .iter()
            .map(|_| Instance {
                faults: Faults::new(),
                task: None,
                shutdown: None,
            })
            .collect();
        Self {
            setup,
            store,
            world,
            instances,
            starts: 0,
        }
    }

    pub(crate) fn world(&self) -> std::sync::MutexGuard<'_, World> {
        crate::world::lock(&self.world)
    }

    pub(crate) fn len(&self) -> usize {
        self.instances.len()
    }

    pub(crate) fn is_up(&self, i: usize) -> bool {
        self.instances[i].task.is_some() && self.instances[i].shutdown.is_some()
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.store.clock().now()
    }

    /// Starts a new incarnation of instance `i` (after waiting for a drained one to
    /// end).
    pub(crate) async fn start(&mut self, i: usize) {
        if let Some(task) = self.instances[i].task.take() {
            let _ = task.await;
        }
        let faults = Faults::new();
        self.starts += 1;
        let incarnation = self.starts;
        let sim = SimStore {
            inner: self.store.clone(),
            inst: i,
            incarnation,
            faults: faults.clone(),
            world: self.world.clone(),
        };
        let skew = TimeDelta::milliseconds(self.setup.skews_ms[i]);
        let node = self.setup.nodes[i].clone();
        let mut builder = Scheduler::builder(sim)
            .node_id(node.clone())
            .lease_ttl(self.setup.ttl)
            .clock(LocalClock::starting_at(self.now() + skew))
            .control_poll(self.setup.control_poll)
            .retry_backoff(Duration::from_millis(50), Duration::from_secs(1))
            .shutdown_grace(Duration::from_secs(2));
        for spec in &self.setup.jobs {
            builder = builder.job(SimJob {
                spec: spec.clone(),
                inst: i,
                incarnation,
                seed: self.setup.seed,
                store: self.store.clone(),
                faults: faults.clone(),
                world: self.world.clone(),
            });
        }
        let scheduler = match builder.build() {
            Ok(s) => s,
            Err(err) => {
                let now = self.now();
                self.world()
                    .violations
                    .push(format!("i{i} could not be built: {err}"));
                self.world().note(now, format!("i{i} build failed: {err}"));
                return;
            }
        };
        let (tx, rx) = oneshot::channel::<()>();
        let stall = faults.clone();
        let task = tokio::spawn(async move {
            let run = scheduler.run_until(async {
                let _ = rx.await;
            });
            stallable(run, &stall).await;
        });
        let now = self.now();
        let mut w = self.world();
        w.note(now, format!("i{i} starts on {node} (skew {skew})"));
        w.events.push(now);
        w.up.push((i, node, now, None));
        drop(w);
        self.instances[i] = Instance {
            faults,
            task: Some(task),
            shutdown: Some(tx),
        };
    }

    /// Ends instance `i`'s up span (and notes the event).
    fn down(&mut self, i: usize, what: &str) {
        let now = self.now();
        let mut w = self.world();
        w.note(now, format!("i{i} {what}"));
        w.events.push(now);
        if let Some(span) = w.up.iter_mut().rev().find(|u| u.0 == i && u.3.is_none()) {
            span.3 = Some(now);
        }
    }

    /// Kills instance `i` at once, as SIGKILL would: its runs are dropped, its leases
    /// left to expire, its calls in flight never answered.
    pub(crate) fn kill(&mut self, i: usize) {
        if !self.is_up(i) {
            return;
        }
        let inst = &mut self.instances[i];
        inst.faults.dead.store(true, Ordering::SeqCst);
        inst.faults.stalled.send_replace(false);
        if let Some(task) = inst.task.take() {
            task.abort();
        }
        inst.shutdown = None;
        self.down(i, "killed");
        let now = self.now();
        self.world().faults.push((i, now, None));
    }

    /// Asks instance `i` to shut down gracefully (it drains on its own).
    pub(crate) fn drain(&mut self, i: usize) {
        if !self.is_up(i) {
            return;
        }
        // A stopped process hears its SIGTERM when it runs again: now.
        if self.instances[i].faults.is_on(Fault::Stall) {
            self.fault(i, Fault::Stall, false);
        }
        if let Some(tx) = self.instances[i].shutdown.take() {
            let _ = tx.send(());
        }
        self.down(i, "shuts down gracefully");
    }

    /// Restarts instance `i` if it is down; a killed one's fault span ends.
    pub(crate) async fn restart(&mut self, i: usize) {
        if self.is_up(i) {
            return;
        }
        let now = self.now();
        if let Some(span) = self
            .world()
            .faults
            .iter_mut()
            .rev()
            .find(|f| f.0 == i && f.2.is_none())
        {
            span.2 = Some(now);
        }
        self.start(i).await;
    }

    /// Sets fault `kind` on instance `i` (`on`), or heals it.
    pub(crate) fn fault(&mut self, i: usize, kind: Fault, on: bool) {
        if !self.is_up(i) {
            return;
        }
        let f = &self.instances[i].faults;
        match kind {
            Fault::Stall => {
                f.stalled.send_replace(on);
            }
            Fault::Slow(ms) => f.slow_ms.store(if on { ms } else { 0 }, Ordering::SeqCst),
            Fault::Failing => f.failing.store(on, Ordering::SeqCst),
            Fault::Losing => f.losing.store(on, Ordering::SeqCst),
        }
        let now = self.now();
        let mut w = self.world();
        w.note(
            now,
            format!("i{i} {kind:?} {}", if on { "begins" } else { "ends" }),
        );
        w.events.push(now);
        if on {
            w.faults.push((i, now, None));
        } else if let Some(span) = w
            .faults
            .iter_mut()
            .rev()
            .find(|f| f.0 == i && f.2.is_none())
        {
            span.2 = Some(now);
        }
    }

    /// Heals every fault of every instance and restarts those down.
    pub(crate) async fn heal_all(&mut self) {
        for i in 0..self.len() {
            if self.is_up(i) {
                for kind in [Fault::Stall, Fault::Slow(0), Fault::Failing, Fault::Losing] {
                    if self.instances[i].faults.is_on(kind) {
                        self.fault(i, kind, false);
                    }
                }
            } else {
                self.restart(i).await;
            }
        }
    }

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
            w.pauses.push(crate::world::PauseSpan {
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

    /// Asks for one run of `job` now (off the whole second: a trigger's run has
    /// the instant it was asked for as its tick, which the model must tell apart
    /// from the job's own ticks).
    pub(crate) async fn trigger(&mut self, job: &str) {
        if self.now().timestamp_subsec_millis() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if let Ok(t) = self
            .store
            .trigger(&ControlRequest::new(job, "simulator"))
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

    /// Drains every instance and waits for them to end.
    pub(crate) async fn stop(&mut self) {
        for i in 0..self.len() {
            self.drain(i);
        }
        for inst in &mut self.instances {
            if let Some(task) = inst.task.take() {
                let _ = task.await;
            }
        }
    }
}

/// A fault of one instance.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fault {
    /// The process stops (its loop, its calls, its runs' work).
    Stall,
    /// Every call waits this many milliseconds first.
    Slow(u64),
    /// Every call fails before it reaches the store.
    Failing,
    /// Every call commits and its answer is lost.
    Losing,
}

/// Runs `fut`, not polling it while the process is stopped.
async fn stallable(fut: impl std::future::Future<Output = ()>, faults: &Faults) {
    let mut fut = std::pin::pin!(fut);
    let mut stalled = faults.stalled.subscribe();
    loop {
        if *stalled.borrow_and_update() {
            let _ = stalled.wait_for(|s| !s).await;
        }
        tokio::select! {
            biased;
            () = &mut fut => return,
            changed = stalled.changed() => {
                if changed.is_err() {
                    fut.await;
                    return;
                }
            }
        }
    }
}
