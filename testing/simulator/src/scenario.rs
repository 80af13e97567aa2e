//! Named scenarios: a cluster and a script written out by hand instead of drawn
//! from a seed, for the edges worth reading as a story. Checked by the same model.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use scheduler_core::{Duplicate, Policy, Scope};

use crate::cluster::{Fault, Setup};
use crate::job::Spec;
use crate::{Action, Options, Report, on_paused_time, run};

/// A job of a scenario: a cluster job, harmless, working `work` each run, unless
/// told otherwise.
#[derive(Debug, Clone)]
pub struct Job {
    spec: Spec,
}

impl Job {
    /// Job `name`, every `every`, with `policy`.
    pub fn new(name: &str, every: Duration, policy: Policy) -> Self {
        Self {
            spec: Spec {
                name: name.to_owned(),
                every,
                scope: Scope::Cluster,
                duplicate: Duplicate::Harmless,
                policy,
                work: every / 4,
                fail_percent: 0,
            },
        }
    }

    /// Once per tick per node.
    pub fn node_scoped(mut self) -> Self {
        self.spec.scope = Scope::Node;
        self
    }

    /// Each run works up to `work` (a share of it drawn from the seed).
    pub fn work(mut self, work: Duration) -> Self {
        self.spec.work = work;
        self
    }

    /// Declares that a duplicate does harm.
    pub fn fenced(mut self) -> Self {
        self.spec.duplicate = Duplicate::NeedsFencing;
        self
    }
}

/// What happens at an instant of a scenario.
#[derive(Debug, Clone)]
pub enum Act {
    /// Pause job `.0` (its index), on instance `.1`'s node or everywhere.
    Pause(usize, Option<usize>),
    /// Resume job `.0`, with a catch-up or not.
    Resume(usize, bool),
    /// Trigger job `.0` now.
    Trigger(usize),
    /// Kill instance `.0`.
    Kill(usize),
    /// Shut instance `.0` down gracefully.
    Drain(usize),
    /// Start instance `.0` again.
    Restart(usize),
    /// Stop (`true`) or resume (`false`) instance `.0`'s process.
    Stall(usize, bool),
    /// Make instance `.0`'s calls fail before they reach the store, or not.
    Failing(usize, bool),
    /// Make instance `.0`'s calls lose their answers, or not.
    Losing(usize, bool),
    /// Put dynamic schedule `.0` (its index in [`Scenario::dynamic`]), every `.1`
    /// seconds, under policy `.2` (`#[job]`'s key syntax).
    Put(usize, u64, &'static str),
    /// Remove dynamic schedule `.0`.
    Remove(usize),
    /// Backfill job `.1` on instance `.0`, from `.2 + .3` to `.2` before now.
    Backfill(usize, usize, Duration, Duration),
}

/// A cluster and its script.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Each instance's node.
    pub nodes: Vec<String>,
    /// The lease ttl.
    pub ttl: Duration,
    /// The jobs, by index.
    pub jobs: Vec<Job>,
    /// The dynamic schedules operators may put (only their name, scope and work
    /// count: a row's schedule and policy are the [`Act::Put`]'s).
    pub dynamic: Vec<Job>,
    /// What happens, at offsets from the start.
    pub script: Vec<(Duration, Act)>,
}

/// Runs `scenario` (the runtime's randomness drawn from `seed`) for `options`.
pub fn scenario(seed: u64, scenario: Scenario, options: Options) -> Report {
    let setup = Setup {
        seed,
        ttl: scenario.ttl,
        control_poll: Some(Duration::from_millis(500)),
        skews_ms: vec![0; scenario.nodes.len()],
        nodes: scenario.nodes,
        jobs: scenario.jobs.into_iter().map(|j| j.spec).collect(),
        dynamic: scenario.dynamic.into_iter().map(|j| j.spec).collect(),
        backfills: true,
        when_due: Vec::new(),
        look_ahead: None,
        held: 0,
        every_scale: 1,
    };
    let mut script: Vec<(u64, Action)> = scenario
        .script
        .into_iter()
        .map(|(at, act)| {
            let at = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
            let action = match act {
                Act::Pause(j, node) => Action::Pause(j, node),
                Act::Resume(j, catch_up) => Action::Resume(j, catch_up),
                Act::Trigger(j) => Action::Trigger(j),
                Act::Kill(i) => Action::Kill(i),
                Act::Drain(i) => Action::Drain(i),
                Act::Restart(i) => Action::Restart(i),
                Act::Stall(i, on) => Action::Fault(i, Fault::Stall, on),
                Act::Failing(i, on) => Action::Fault(i, Fault::Failing, on),
                Act::Losing(i, on) => Action::Fault(i, Fault::Losing, on),
                Act::Put(d, every, policy) => Action::Put(d, every, policy),
                Act::Remove(d) => Action::Remove(d),
                Act::Backfill(i, j, back, len) => Action::Backfill(
                    i,
                    j,
                    u64::try_from(back.as_millis()).unwrap_or(u64::MAX),
                    u64::try_from(len.as_millis()).unwrap_or(u64::MAX),
                ),
            };
            (at, action)
        })
        .collect();
    script.sort_by_key(|(at, _)| *at);
    on_paused_time(
        seed,
        run(setup, script, options, StdRng::seed_from_u64(seed)),
    )
}
