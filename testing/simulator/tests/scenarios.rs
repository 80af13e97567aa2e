//! Named scenarios of the simulator: edges written out as stories, checked by the
//! same model as the seeds.

use std::time::Duration;

use scheduler_core::{CatchUp, Policy};
use scheduler_simulator::{Act, Job, Options, Scenario, scenario};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn options() -> Options {
    Options {
        chaos: secs(30),
        quiet: secs(15),
        ..Options::default()
    }
}

/// A cluster job under `CatchUp::All`, paused on one node and resumed there with a
/// catch-up: the other node ran every tick meanwhile, so nothing is caught up (the
/// paused node's catch-up ran them again, each under a backfill lease of its own:
/// found by seed 1).
#[test]
fn a_node_pause_of_a_cluster_job_resumed_with_catch_up_runs_no_tick_twice() {
    let all = Policy::default().catch_up(CatchUp::All { max: 3 });
    let report = scenario(
        1,
        Scenario {
            nodes: vec!["n0".into(), "n1".into()],
            ttl: secs(4),
            jobs: vec![Job::new("sweep", secs(1), all).fenced()],
            dynamic: vec![],
            script: vec![
                (secs(5), Act::Pause(0, Some(1))),
                (secs(12), Act::Resume(0, true)),
            ],
        },
        options(),
    );
    report.assert_ok();
    assert!(report.attempts >= 20, "{report:#?}");
}

/// A resume's catch-up under `CatchUp::All` stops at a pause made meanwhile: the
/// instance running a caught-up tick dies, the job is paused again, and the tick it
/// held is not retaken by the other instance's catch-up once its lease expires
/// during the new pause (it was: found by seed 82).
#[test]
fn a_catch_up_stops_at_a_pause_made_meanwhile() {
    let all = Policy::default().catch_up(CatchUp::All { max: 3 });
    let report = scenario(
        2,
        Scenario {
            nodes: vec!["n0".into(), "n1".into()],
            ttl: secs(3),
            jobs: vec![Job::new("report", secs(1), all).work(secs(3)).fenced()],
            dynamic: vec![],
            script: vec![
                (secs(5), Act::Pause(0, None)),
                (secs(9), Act::Resume(0, true)),
                (Duration::from_millis(9_600), Act::Kill(0)),
                (secs(10), Act::Pause(0, None)),
                (secs(15), Act::Restart(0)),
                (secs(20), Act::Resume(0, false)),
            ],
        },
        options(),
    );
    report.assert_ok();
}
