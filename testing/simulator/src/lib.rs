//! A deterministic simulator of a whole cluster of schedulers.
//!
//! One process runs N [`Scheduler`](scheduler_core::Scheduler) instances on one
//! [`MemoryStore`] under paused tokio time, on one thread. A seeded generator draws
//! the cluster (instances, nodes, clock skews, ttl, control polling, jobs with every
//! catch-up × overlap policy, retries, timeouts, fencing, both scopes) and a script
//! of what happens to it, interleaved:
//! - faults of an instance: killed and restarted, stalled (nothing it does goes on,
//!   as under SIGSTOP), calls slow, failing before they reach the store, or
//!   committed with their answer lost, graceful shutdowns;
//! - operators: pause and resume (with and without catch-up, everywhere and per
//!   node), trigger now; with [`Options::extras`], dynamic schedules put, changed,
//!   removed, paused, resumed and triggered, and backfills of past ranges.
//!
//! The reference model (`world.rs`) checks every run: no tick of a job committed
//! twice (outside the documented window: its first holder was cut off from the
//! store, or died, before it could hand the tick back), no trigger run twice,
//! nothing granted while paused, no tick run after a resume without catch-up that
//! dropped it, no run begun before its tick, fencing tokens that grow per lease,
//! and liveness: every tick due in a quiet stretch (no fault, no start or stop, no
//! operator's act, nothing paused, an instance up, no run of the job under way) ran.
//!
//! The runtime's own randomness (holders, backoff) is drawn from the seed too
//! ([`scheduler_core::seed_thread_rng`]), and its `select!`s are biased, so a seed
//! replays the same run exactly: [`Report::digest`] is the same every time.

mod cluster;
mod extras;
mod job;
mod operators;
mod scenario;
mod store;
mod world;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use scheduler_core::{CatchUp, Duplicate, LocalClock, MemoryStore, Overlap, Policy, Scope};

use cluster::{Cluster, Fault, Setup};
use job::Spec;
use world::World;

pub use scenario::{Act, Job, Scenario, scenario};

/// How much to simulate per seed.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Simulated time with faults and operators at work.
    pub chaos: Duration,
    /// Simulated time after everything healed, for liveness and the healthy
    /// cluster's takes.
    pub quiet: Duration,
    /// Whether operators also put, change and remove dynamic schedules and
    /// backfill past ranges (drawn from a stream of their own: without them a seed
    /// replays as it did before they existed).
    pub extras: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            chaos: Duration::from_secs(120),
            quiet: Duration::from_secs(30),
            extras: true,
        }
    }
}

/// What one seed's run found.
#[derive(Debug)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The violations of the promise, in the order found.
    pub violations: Vec<String>,
    /// The end of the trace (the last 150 lines), for a readable failure.
    pub trace_tail: String,
    /// A hash of the whole trace: the same for every replay of the seed.
    pub digest: u64,
    /// How many ticks the liveness check found in quiet stretches (each had to run).
    pub liveness_checked: u64,
    /// Attempts begun.
    pub attempts: usize,
    /// In the healthy tail: takes sent per instance per instant at which some job
    /// had a tick.
    pub takes_per_tick: f64,
    /// The simulated time.
    pub simulated: Duration,
    /// The cluster, as drawn.
    pub setup: String,
    /// The store's clock when the cluster started.
    pub started: DateTime<Utc>,
    /// Every tick an attempt began for: the key job (`job`, or `job:node`) and the
    /// tick's instant.
    pub ran: std::collections::BTreeSet<(String, DateTime<Utc>)>,
    /// The triggers asked for: the job and the trigger's instant.
    pub triggers: Vec<(String, DateTime<Utc>)>,
    /// The ticks committed, with how many times.
    pub committed: std::collections::BTreeMap<(String, DateTime<Utc>), usize>,
}

impl Report {
    /// How many times `job`'s tick `at` seconds after the start committed (see
    /// [`tick`](Self::tick)).
    pub fn commits_of(&self, job: &str, at: u64) -> usize {
        let tick = self.tick(at);
        self.committed
            .get(&(job.to_owned(), tick))
            .copied()
            .unwrap_or(0)
    }

    /// Whether an attempt of `job`'s tick `at` seconds after the start began (see
    /// [`tick`](Self::tick)).
    pub fn ran_tick(&self, job: &str, at: u64) -> bool {
        self.ran.contains(&(job.to_owned(), self.tick(at)))
    }

    /// The instant `at` whole seconds after the start's whole second (the store's
    /// clock starts off the whole second; ticks every second fall on it).
    pub fn tick(&self, at: u64) -> DateTime<Utc> {
        let secs = self.started.timestamp() + i64::try_from(at).unwrap_or(0);
        DateTime::<Utc>::from_timestamp(secs, 0).unwrap_or_default()
    }
}

impl Report {
    /// Panics with the seed, the violations and the trace's end, if any violation.
    ///
    /// # Panics
    /// When the run broke the promise.
    pub fn assert_ok(&self) {
        assert!(
            self.violations.is_empty(),
            "seed {} broke the promise ({} violations; replay with SIM_SEED={}):\n{}\n\
             cluster: {}\ntrace (end):\n{}",
            self.seed,
            self.violations.len(),
            self.seed,
            self.violations.join("\n"),
            self.setup,
            self.trace_tail
        );
    }
}

/// An action of the script.
#[derive(Debug, Clone)]
enum Action {
    Kill(usize),
    Restart(usize),
    Drain(usize),
    Fault(usize, Fault, bool),
    Pause(usize, Option<usize>),
    Resume(usize, bool),
    Trigger(usize),
    /// Put dynamic schedule `.0` every `.1` seconds under policy `.2`.
    Put(usize, u64, &'static str),
    Remove(usize),
    /// Backfill on instance `.0` job `.1`, from `.2 + .3` to `.2` ms before now.
    Backfill(usize, usize, u64, u64),
}

/// Draws the cluster for `seed`.
fn setup(seed: u64, rng: &mut StdRng) -> Setup {
    let n = rng.random_range(2..=4usize);
    let nodes_count = if rng.random_bool(0.3) { n - 1 } else { n };
    let nodes = (0..n).map(|i| format!("n{}", i % nodes_count)).collect();
    let skews_ms = (0..n)
        .map(|_| rng.random_range(-3_000..=3_000i64))
        .collect();
    let ttl = Duration::from_secs(rng.random_range(2..=6u64));
    let control_poll = match rng.random_range(0..10u32) {
        0 => None,
        1..=5 => Some(Duration::from_millis(500)),
        _ => Some(Duration::from_secs(1)),
    };
    let jobs = (0..rng.random_range(2..=4usize))
        .map(|k| {
            let every = Duration::from_secs(rng.random_range(1..=3u64));
            let catch_up = match rng.random_range(0..3u32) {
                0 => CatchUp::Skip,
                1 => CatchUp::Latest,
                _ => CatchUp::All {
                    max: rng.random_range(1..=3u32),
                },
            };
            let overlap = match rng.random_range(0..4u32) {
                0 => Overlap::Skip,
                1 => Overlap::BufferOne,
                2 => Overlap::CancelRunning,
                _ => Overlap::Concurrent { max: 2 },
            };
            let mut policy = Policy::default().catch_up(catch_up).overlap(overlap);
            let mut fail_percent = 0;
            if rng.random_bool(0.3) {
                policy = policy.retry(1, every / 8);
                fail_percent = 20;
            }
            if rng.random_bool(0.2) {
                policy = policy.timeout(every / 2);
            }
            // Mostly shorter than the period; sometimes longer, for the overlap.
            let work = if rng.random_bool(0.2) {
                every * 2
            } else {
                every / 2
            };
            Spec {
                name: format!("job{k}"),
                every,
                scope: if rng.random_bool(0.25) {
                    Scope::Node
                } else {
                    Scope::Cluster
                },
                duplicate: if rng.random_bool(0.4) {
                    Duplicate::NeedsFencing
                } else {
                    Duplicate::Harmless
                },
                policy,
                work,
                fail_percent,
            }
        })
        .collect();
    Setup {
        seed,
        ttl,
        control_poll,
        nodes,
        skews_ms,
        jobs,
        dynamic: Vec::new(),
        backfills: false,
        when_due: Vec::new(),
        look_ahead: None,
        held: 0,
        every_scale: 1,
    }
}

/// Draws the script: actions at offsets (milliseconds from the start), each fault
/// with its end.
fn script(setup: &Setup, chaos: Duration, rng: &mut StdRng) -> Vec<(u64, Action)> {
    let n = setup.nodes.len();
    let jobs = setup.jobs.len();
    let ttl_ms = u64::try_from(setup.ttl.as_millis()).unwrap_or(u64::MAX);
    let end = u64::try_from(chaos.as_millis()).unwrap_or(u64::MAX);
    let mut out = Vec::new();
    let mut at = 3_000u64;
    while at < end {
        let i = rng.random_range(0..n);
        let j = rng.random_range(0..jobs);
        let lasts = rng.random_range(200..=ttl_ms * 2);
        match rng.random_range(0..12u32) {
            0 => {
                out.push((at, Action::Kill(i)));
                out.push((at + lasts, Action::Restart(i)));
            }
            1 => {
                out.push((at, Action::Drain(i)));
                out.push((at + lasts, Action::Restart(i)));
            }
            2 | 3 => {
                let fault = match rng.random_range(0..4u32) {
                    0 => Fault::Stall,
                    1 => Fault::Slow(rng.random_range(50..=2_000)),
                    2 => Fault::Failing,
                    _ => Fault::Losing,
                };
                out.push((at, Action::Fault(i, fault, true)));
                out.push((at + lasts, Action::Fault(i, fault, false)));
            }
            4 | 5 => {
                let node = rng.random_bool(0.3).then_some(i);
                out.push((at, Action::Pause(j, node)));
                out.push((at + lasts * 2, Action::Resume(j, rng.random_bool(0.5))));
            }
            6 | 7 => out.push((at, Action::Trigger(j))),
            // Nothing happens for a while: quiet stretches for the liveness check.
            _ => {}
        }
        at += rng.random_range(500..=6_000);
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

/// Simulates the cluster of `seed` for `options`' time.
pub fn simulate(seed: u64, options: Options) -> Report {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut setup = setup(seed, &mut rng);
    let mut script = script(&setup, options.chaos, &mut rng);
    if options.extras {
        let (dynamic, extras) =
            extras::draw(seed, setup.nodes.len(), setup.jobs.len(), options.chaos);
        setup.dynamic = dynamic;
        setup.backfills = true;
        (setup.when_due, setup.look_ahead, setup.held) = extras::when_due(seed, setup.nodes.len());
        if setup.look_ahead.is_some() {
            setup.every_scale = 4;
        }
        script.extend(extras);
        script.sort_by_key(|(at, _)| *at);
    }
    on_paused_time(seed, run(setup, script, options, rng))
}

/// A healthy cluster, nothing happening to it: `instances` instances (one node
/// each) running `jobs` cluster jobs every `every`, whose runs work for up to
/// `work`, with leases of `ttl`, for `options.chaos + options.quiet`.
pub fn healthy(
    seed: u64,
    instances: usize,
    jobs: usize,
    every: Duration,
    work: Duration,
    ttl: Duration,
    options: Options,
) -> Report {
    let setup = Setup {
        seed,
        ttl,
        control_poll: Some(Duration::from_secs(5)),
        nodes: (0..instances).map(|i| format!("n{i}")).collect(),
        skews_ms: vec![0; instances],
        jobs: (0..jobs)
            .map(|k| Spec {
                name: format!("job{k}"),
                every,
                scope: Scope::Cluster,
                duplicate: Duplicate::Harmless,
                policy: Policy::default(),
                work,
                fail_percent: 0,
            })
            .collect(),
        dynamic: Vec::new(),
        backfills: false,
        when_due: Vec::new(),
        look_ahead: None,
        held: 0,
        every_scale: 1,
    };
    let rng = StdRng::seed_from_u64(seed);
    on_paused_time(seed, run(setup, Vec::new(), options, rng))
}

/// Runs `simulation` on a runtime of this thread, under paused time, with the
/// runtime's randomness drawn from `seed`.
fn on_paused_time(seed: u64, simulation: impl std::future::Future<Output = Report>) -> Report {
    scheduler_core::seed_thread_rng(Some(seed));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    let report = match runtime {
        Ok(rt) => rt.block_on(simulation),
        Err(err) => panic!("no tokio runtime: {err}"),
    };
    scheduler_core::seed_thread_rng(None);
    report
}

async fn run(
    setup: Setup,
    script: Vec<(u64, Action)>,
    options: Options,
    mut rng: StdRng,
) -> Report {
    let seed = setup.seed;
    let described = format!("{setup:?}");
    // A fixed start, off the whole second by a drawn amount.
    let t0 = DateTime::<Utc>::from_timestamp(1_893_456_000, 0).unwrap_or_default()
        + TimeDelta::milliseconds(rng.random_range(0..1_000));
    let store = Arc::new(MemoryStore::with_clock(LocalClock::starting_at(t0)));
    if rng.random_bool(0.5) {
        store.announce_controls(true);
    }
    let world = Arc::new(Mutex::new(World {
        ttl: setup.ttl,
        live: std::env::var_os("SIM_LIVE").is_some(),
        jobs: setup
            .jobs
            .iter()
            .map(|s| world::JobModel {
                name: s.name.clone(),
                node_scoped: s.scope == Scope::Node,
                every: s.every,
                active: None,
            })
            .collect(),
        hears_within: setup
            .control_poll
            .map(|poll| poll + setup.ttl + Duration::from_secs(3)),
        ..World::default()
    }));
    // The jobs in code, then the dynamic schedules (which operators pause, resume
    // and trigger too).
    let job_names: Vec<String> = setup
        .jobs
        .iter()
        .chain(&setup.dynamic)
        .map(|s| s.name.clone())
        .collect();
    let mut cluster = Cluster::new(setup, store.clone(), world.clone());
    for i in 0..cluster.len() {
        cluster.start(i).await;
    }
    let started = tokio::time::Instant::now();
    for (at, action) in script {
        tokio::time::sleep_until(started + Duration::from_millis(at)).await;
        match action {
            Action::Kill(i) => cluster.kill(i),
            Action::Restart(i) => cluster.restart(i).await,
            Action::Drain(i) => cluster.drain(i),
            Action::Fault(i, f, on) => cluster.fault(i, f, on),
            Action::Pause(j, node) => {
                let node = node.map(|i| cluster.setup.nodes[i].clone());
                cluster.pause(&job_names[j], node.as_deref()).await;
            }
            Action::Resume(j, catch_up) => cluster.resume(&job_names[j], catch_up).await,
            Action::Trigger(j) => cluster.trigger(&job_names[j]).await,
            Action::Put(d, every, policy) => cluster.put_schedule(d, every, policy).await,
            Action::Remove(d) => cluster.remove_schedule(d).await,
            Action::Backfill(i, j, back, len) => cluster.backfill(i, j, back, len),
        }
    }
    tokio::time::sleep_until(started + options.chaos).await;
    // Everything heals; the cluster runs on quietly.
    cluster.heal_all().await;
    for job in &job_names {
        cluster.resume(job, false).await;
    }
    let healed = store.clock().now();
    tokio::time::sleep(options.quiet).await;
    let end = store.clock().now();
    cluster.stop().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let simulated = started.elapsed();
    let mut w = cluster.world();
    let liveness_checked = w.check_liveness(t0, end);
    let ran = w.attempts.keys().cloned().collect();
    let committed = w
        .commits
        .iter()
        .map(|(k, v)| (k.clone(), v.len()))
        .collect();
    let takes_per_tick = takes_per_tick(&w, healed, end);
    let digest = w.trace.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, line| {
        line.bytes()
            .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    });
    Report {
        seed,
        violations: w.violations.clone(),
        trace_tail: w.tail(150),
        digest,
        liveness_checked,
        attempts: w.attempts.values().map(Vec::len).sum(),
        takes_per_tick,
        simulated,
        setup: described,
        started: t0,
        ran,
        committed,
        triggers: w.triggers.clone(),
    }
}

/// Takes per instance per tick instant in the healthy tail (`healed` to `end`,
/// after a ttl and two seconds for the cluster to settle).
fn takes_per_tick(w: &World, healed: DateTime<Utc>, end: DateTime<Utc>) -> f64 {
    let from = healed + world::delta(w.ttl) + TimeDelta::seconds(2);
    let to = end - TimeDelta::seconds(1);
    if to <= from {
        return 0.0;
    }
    let mut instants = std::collections::BTreeSet::new();
    for job in &w.jobs {
        let step = i64::try_from(job.every.as_millis()).unwrap_or(i64::MAX);
        let mut t = from.timestamp_millis().div_euclid(step) * step + step;
        while t < to.timestamp_millis() {
            instants.insert(t);
            t += step;
        }
    }
    let instances = w.up.iter().map(|u| u.0).max().map_or(1, |m| m + 1);
    let takes = w
        .takes
        .iter()
        .filter(|(_, at, _)| from <= *at && *at < to)
        .count();
    takes as f64 / (instances * instants.len().max(1)) as f64
}
