//! The operators' extras, drawn from a stream of their own (so that a seed's
//! cluster and its faults are drawn as before): dynamic schedules put, changed,
//! removed, paused, resumed and triggered, and backfills of past ranges.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use scheduler_core::{Duplicate, Policy, Scope};

use crate::Action;
use crate::job::Spec;

/// What the extras' stream is drawn from, beside the seed.
const STREAM: u64 = 0x6578_7472_6173;

/// Policies of dynamic schedules, in `#[job]`'s key syntax: every catch-up ×
/// overlap, some with retries or a timeout.
const POLICIES: &[&str] = &[
    "",
    "catch_up = \"skip\", overlap = \"skip\"",
    "catch_up = \"latest\", overlap = \"buffer_one\"",
    "catch_up = \"all\", catch_up_max = 3, overlap = \"cancel_running\"",
    "catch_up = \"all\", catch_up_max = 2, overlap = \"concurrent\", max_concurrent = 2",
    "catch_up = \"latest\", overlap = \"cancel_running\", retry = 1, retry_backoff = \"100ms\"",
    "catch_up = \"skip\", overlap = \"concurrent\", max_concurrent = 2, timeout = \"1s\"",
    "catch_up = \"all\", catch_up_max = 3, overlap = \"buffer_one\", retry = 1",
];

/// The dynamic schedules of `seed` and the extras' script over `chaos`: actions at
/// offsets (milliseconds), on `instances` instances and `jobs` jobs in code.
pub(crate) fn draw(
    seed: u64,
    instances: usize,
    jobs: usize,
    chaos: Duration,
) -> (Vec<Spec>, Vec<(u64, Action)>) {
    let mut rng = StdRng::seed_from_u64(seed ^ STREAM);
    let dynamic: Vec<Spec> = (0..rng.random_range(1..=2usize))
        .map(|d| Spec {
            name: format!("dyn{d}"),
            every: Duration::from_secs(1),
            scope: if rng.random_bool(0.25) {
                Scope::Node
            } else {
                Scope::Cluster
            },
            duplicate: Duplicate::Harmless,
            policy: Policy::default(),
            work: Duration::from_millis(rng.random_range(200..=2_500)),
            fail_percent: if rng.random_bool(0.3) { 20 } else { 0 },
        })
        .collect();
    let end = u64::try_from(chaos.as_millis()).unwrap_or(u64::MAX);
    let mut out = Vec::new();
    let mut at = rng.random_range(2_000..=6_000u64);
    while at < end {
        let d = rng.random_range(0..dynamic.len());
        match rng.random_range(0..8u32) {
            0..=2 => {
                let every = rng.random_range(1..=3u64);
                let policy = POLICIES[rng.random_range(0..POLICIES.len())];
                out.push((at, Action::Put(d, every, policy)));
            }
            3 => out.push((at, Action::Remove(d))),
            // A dynamic schedule paused and resumed (with or without catch-up), or
            // triggered: its index follows the jobs in code.
            4 => {
                let node = rng.random_bool(0.3).then(|| rng.random_range(0..instances));
                let lasts = rng.random_range(1_000..=8_000u64);
                out.push((at, Action::Pause(jobs + d, node)));
                out.push((at + lasts, Action::Resume(jobs + d, rng.random_bool(0.6))));
            }
            5 => out.push((at, Action::Trigger(jobs + d))),
            _ => {
                let i = rng.random_range(0..instances);
                let j = rng.random_range(0..jobs);
                let back = rng.random_range(0..=5_000u64);
                let len = rng.random_range(0..=8_000u64);
                out.push((at, Action::Backfill(i, j, back, len)));
            }
        }
        at += rng.random_range(2_000..=12_000);
    }
    (dynamic, out)
}

/// What the draw of which instances load their dynamic schedules as they come due
/// is drawn from, beside the seed (a stream of its own: the rest of a seed is drawn
/// as before).
const WHEN_DUE_STREAM: u64 = 0x0077_6865_6e64_7565;

/// Which of `instances` load their dynamic schedules as they come due: each with
/// even odds, so a seed's cluster has all, none or some of them (a fleet mid-way
/// through turning it on); and, for half the seeds, the least look-ahead the
/// runtime allows (three poll intervals), so that rows every few seconds are let
/// go and loaded again between their ticks; and how many rows each holds before
/// it lets idle ones go (none for two seeds in three). `SIM_NO_WHEN_DUE` set: none (to tell a
/// defect of that mode from another).
pub(crate) fn when_due(seed: u64, instances: usize) -> (Vec<bool>, Option<Duration>, usize) {
    if std::env::var_os("SIM_NO_WHEN_DUE").is_some() {
        return (Vec::new(), None, 0);
    }
    let mut rng = StdRng::seed_from_u64(seed ^ WHEN_DUE_STREAM);
    let mut when_due: Vec<bool> = (0..instances).map(|_| rng.random_bool(0.5)).collect();
    let short = rng.random_bool(0.5).then_some(Duration::ZERO);
    // `SIM_WHEN_DUE_NONE` set: the same seed (periods included), no instance in the
    // mode: whether a defect is the mode's.
    if std::env::var_os("SIM_WHEN_DUE_NONE").is_some() {
        when_due.iter_mut().for_each(|on| *on = false);
    }
    // Held at least: none (every idle row let go), or a few (some let go).
    let held = [0, 0, 2][rng.random_range(0..3)];
    (when_due, short, held)
}
