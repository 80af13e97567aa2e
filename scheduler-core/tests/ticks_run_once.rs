//! Every tick of a job runs once, in order, aligned to whole seconds; instances
//! share a cluster job's ticks and each runs its own node job's.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::time::Duration;

use chrono::TimeDelta;
use scheduler_core::{Outcome, Scope};
use support::{Log, Probe, builder, runs, store};

#[tokio::test(start_paused = true)]
async fn every_tick_runs_once_in_order() {
    let (store, log) = (store(), Log::default());
    support::mid_second(&store).await;
    let scheduler = builder(&store)
        .job(Probe::new("tick", &store, &log))
        .build()
        .expect("build");
    let stats = scheduler.stats();
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(10_500)))
        .await;
    let ticks: Vec<_> = runs(&log, "tick").iter().map(|r| r.tick).collect();
    assert!(ticks.len() >= 10, "{ticks:?}");
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], TimeDelta::seconds(1), "{ticks:?}");
    }
    for t in &ticks {
        assert_eq!(
            t.timestamp_subsec_nanos(),
            0,
            "ticks are aligned to whole seconds"
        );
    }
    assert_eq!(
        stats.count("tick", Outcome::Succeeded) as usize,
        ticks.len()
    );
}

#[tokio::test(start_paused = true)]
async fn two_instances_share_a_cluster_job_and_each_runs_its_node_job() {
    let (store, log) = (store(), Log::default());
    let mut node_job = Probe::new("per-node", &store, &log);
    node_job.scope = Scope::Node;
    let a = builder(&store)
        .node_id("a")
        .job(Probe::new("cluster", &store, &log))
        .job(node_job.clone())
        .build()
        .expect("build");
    let b = builder(&store)
        .node_id("b")
        .job(Probe::new("cluster", &store, &log))
        .job(node_job)
        .build()
        .expect("build");
    let stop = Duration::from_millis(5_500);
    tokio::join!(
        a.run_until(tokio::time::sleep(stop)),
        b.run_until(tokio::time::sleep(stop))
    );
    let mut cluster: Vec<_> = runs(&log, "cluster").iter().map(|r| r.tick).collect();
    let n = cluster.len();
    cluster.dedup();
    assert_eq!(cluster.len(), n, "a cluster tick ran twice");
    assert!(n >= 5);
    for node in ["a", "b"] {
        let mut ticks: Vec<_> = runs(&log, "per-node")
            .iter()
            .filter(|r| r.node == node)
            .map(|r| r.tick)
            .collect();
        let n = ticks.len();
        ticks.sort();
        ticks.dedup();
        assert_eq!(ticks.len(), n);
        assert!(n >= 5, "node {node} ran its node job {n} times");
    }
}

/// An operator reading a lease sees the node id the app configured, not the host.
#[tokio::test(start_paused = true)]
async fn holders_name_the_configured_node() {
    let (store, log) = (store(), Log::default());
    let scheduler = builder(&store)
        .node_id("billing-7")
        .job(Probe::new("tick", &store, &log))
        .build()
        .expect("build");
    scheduler
        .run_until(tokio::time::sleep(Duration::from_millis(2_500)))
        .await;
    let runs = runs(&log, "tick");
    assert!(!runs.is_empty());
    let prefix = format!("billing-7:{}:", std::process::id());
    for run in &runs {
        assert!(run.holder.starts_with(&prefix), "{}", run.holder);
    }
}
