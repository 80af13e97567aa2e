//! The cluster: N scheduler instances on one memory store, started, stalled,
//! killed, drained and restarted by the driver, with the operators' hands.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::{Backfiller, LocalClock, MemoryStore, Scheduler};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::job::{Body, SimHandler, SimJob, Spec};
pub(crate) use crate::store::Fault;
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
    /// The dynamic schedules an operator may put (run by the `sim` handler, which
    /// every instance registers when there are any).
    pub(crate) dynamic: Vec<Spec>,
    /// Whether operators backfill (each instance keeps a backfiller).
    pub(crate) backfills: bool,
    /// Which instances load their dynamic schedules as they come due
    /// (`SchedulerBuilder::load_schedules_when_due`); none when empty.
    pub(crate) when_due: Vec<bool>,
    /// Their look-ahead, when not the default (the least the runtime allows: rows
    /// every few seconds are let go and loaded again between ticks).
    pub(crate) look_ahead: Option<Duration>,
    /// How many rows each instance in that mode holds before it lets idle ones go
    /// (`SchedulerBuilder::schedules_held`).
    pub(crate) held: usize,
    /// What the periods of the dynamic schedules operators put are multiplied by
    /// (1 but with the short look-ahead: then rows every 4 to 12 s, let go and
    /// loaded again between ticks).
    pub(crate) every_scale: u64,
}

/// One instance: its node, its current incarnation's faults and task.
#[derive(Debug)]
pub(crate) struct Instance {
    pub(crate) faults: Arc<Faults>,
    task: Option<JoinHandle<()>>,
    shutdown: Option<oneshot::Sender<()>>,
    /// Its backfiller, when the script has backfills.
    pub(crate) backfiller: Option<Backfiller>,
    /// Its operators' backfills under way (dropped with it, as a process's).
    pub(crate) backfills: Vec<JoinHandle<()>>,
}

/// The running cluster.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) setup: Setup,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) world: Arc<Mutex<World>>,
    pub(crate) instances: Vec<Instance>,
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
                backfiller: None,
                backfills: Vec::new(),
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

    pub(crate) fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.store.clock().now()
    }

    /// Starts a new incarnation of instance `i` (after waiting for a drained one to
    /// end).
    pub(crate) async fn start(&mut self, i: usize) {
        if let Some(task) = self.instances[i].task.take() {
            let _ = task.await;
        }
        // The process that ran them is gone.
        for backfill in self.instances[i].backfills.drain(..) {
            backfill.abort();
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
            .load_schedules_when_due(self.setup.when_due.get(i).copied().unwrap_or(false))
            .schedules_look_ahead(self.setup.look_ahead.unwrap_or(Duration::from_secs(30)))
            .schedules_held(self.setup.held)
            .retry_backoff(Duration::from_millis(50), Duration::from_secs(1))
            .shutdown_grace(Duration::from_secs(2));
        let body = Arc::new(Body {
            inst: i,
            incarnation,
            seed: self.setup.seed,
            store: self.store.clone(),
            faults: faults.clone(),
            world: self.world.clone(),
        });
        for spec in &self.setup.jobs {
            builder = builder.job(SimJob {
                spec: spec.clone(),
                body: body.clone(),
            });
        }
        if !self.setup.dynamic.is_empty() {
            builder = builder.handler(
                "sim",
                SimHandler {
                    specs: self.setup.dynamic.clone(),
                    body,
                },
            );
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
        let backfiller = self.setup.backfills.then(|| scheduler.backfiller());
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
            backfiller,
            backfills: Vec::new(),
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
        for backfill in inst.backfills.drain(..) {
            backfill.abort();
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
        // The model ends every fault of the instance here: so does an incarnation
        // still draining (it would otherwise stay cut off while the model counts
        // it healthy), once the calls a slow store delayed have arrived.
        let old = &self.instances[i].faults;
        let in_flight = TimeDelta::milliseconds(
            i64::try_from(old.slow_ms.load(Ordering::SeqCst)).unwrap_or(i64::MAX),
        );
        for span in self
            .world()
            .faults
            .iter_mut()
            .filter(|f| f.0 == i && f.2.is_none())
        {
            span.2 = Some(now + in_flight);
        }
        old.stalled.send_replace(false);
        old.slow_ms.store(0, Ordering::SeqCst);
        old.failing.store(false, Ordering::SeqCst);
        old.losing.store(false, Ordering::SeqCst);
        self.start(i).await;
    }

    /// Sets fault `kind` on instance `i` (`on`), or heals it.
    pub(crate) fn fault(&mut self, i: usize, kind: Fault, on: bool) {
        if !self.is_up(i) {
            return;
        }
        let f = &self.instances[i].faults;
        // A call sent just before a slow store heals reaches it that much later:
        // the instance stays cut off until then.
        let in_flight = TimeDelta::milliseconds(
            i64::try_from(f.slow_ms.load(Ordering::SeqCst)).unwrap_or(i64::MAX),
        );
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
            let slow = matches!(kind, Fault::Slow(_));
            span.2 = Some(if slow { now + in_flight } else { now });
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

    /// Drains every instance and waits for them to end.
    pub(crate) async fn stop(&mut self) {
        for i in 0..self.len() {
            self.drain(i);
        }
        for inst in &mut self.instances {
            if let Some(task) = inst.task.take() {
                let _ = task.await;
            }
            for backfill in inst.backfills.drain(..) {
                backfill.abort();
            }
        }
    }
}

/// Runs `fut`, not polling it while the process is stopped.
pub(crate) async fn stallable(fut: impl std::future::Future<Output = ()>, faults: &Faults) {
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
