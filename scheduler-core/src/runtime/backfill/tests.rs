//! A backfill's range and leases, with plain values.

use std::time::Duration;

use chrono::DateTime;

use super::*;
use crate::job::Scope;
use crate::schedule::Schedule;

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(s, 0).unwrap_or_default()
}

#[test]
fn a_range_holds_its_ticks_both_ends_included() {
    let every = Schedule::every(Duration::from_secs(10))
        .compile()
        .unwrap_or_else(|e| panic!("{e}"));
    let ticks = ticks_in(&every, at(100), at(150), 100).unwrap_or_default();
    let secs: Vec<i64> = ticks.iter().map(|t| t.at().timestamp()).collect();
    assert_eq!(secs, [100, 110, 120, 130, 140, 150]);
    let inside = ticks_in(&every, at(101), at(149), 100).unwrap_or_default();
    assert_eq!(inside.len(), 4);
    assert_eq!(ticks_in(&every, at(150), at(100), 100), Some(Vec::new()));
    assert_eq!(
        ticks_in(&every, at(100), at(150), 6).map(|t| t.len()),
        Some(6)
    );
    assert_eq!(ticks_in(&every, at(100), at(150), 5), None);
    // A huge range is refused without listing it.
    assert_eq!(ticks_in(&every, at(0), at(i64::from(i32::MAX)), 10), None);
    // From the calendar's first instant, too.
    assert_eq!(ticks_in(&every, DateTime::<Utc>::MIN_UTC, at(0), 10), None);
}

#[test]
fn backfill_leases_are_never_live_leases() {
    let tick = Tick::new(at(1_700_000_000));
    let name = |job: &str, scope, node: &str| {
        let live = LeaseName::for_job(job, scope, node).unwrap_or_else(|e| panic!("{e}"));
        lease_name(&live, tick)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_string()
    };
    assert_eq!(
        name("sweep", Scope::Cluster, "n"),
        "sweep\\@1700000000000000"
    );
    assert_eq!(name("up", Scope::Node, "eu"), "up:eu\\@1700000000000000");
    // A job whose name looks like a backfill lease gets a live lease of its own.
    let backfill = name("sweep", Scope::Cluster, "n");
    for (job, scope, node) in [
        (backfill.as_str(), Scope::Cluster, "n"),
        ("sweep\\", Scope::Node, "@1700000000000000"),
        ("sweep", Scope::Node, "\\@1700000000000000"),
    ] {
        let live = LeaseName::for_job(job, scope, node).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(live.as_str(), backfill, "{job} {node}");
    }
    // Names too long for a tick suffix are refused, not cut.
    let long = LeaseName::new("x".repeat(190)).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        lease_name(&long, tick),
        Err(Error::InvalidName { .. })
    ));
}
