//! The state machine of one job's ticks, with plain values.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::lease::Held;
use crate::lease::{FencingToken, Lease, LeaseName};
use crate::policy::Policy;
use crate::runtime::decide::cadence::{Polling, overlap_step};
use crate::runtime::decide::events::{Command, Won};
use crate::runtime::decide::runs::Ended;
use crate::schedule::Schedule;

impl JobTicks {
    /// The run ended, whatever its end: it no longer holds the job.
    fn on_finished(&mut self) -> Option<Running> {
        self.running.take().map(|run| *run)
    }
}

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(s * 1000).unwrap()
}

fn ms(v: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(v).unwrap()
}

#[test]
fn a_tick_behind_a_run_elsewhere_polls_a_sixteenth_of_its_window() {
    let ms = TimeDelta::milliseconds;
    assert_eq!(
        overlap_step(ms(1_000), ms(1_000)),
        ms(62) + TimeDelta::microseconds(500)
    );
    assert_eq!(overlap_step(ms(10_000), ms(666)), ms(625));
    assert_eq!(overlap_step(ms(60_000), ms(1_000)), ms(1_000));
    // Short windows: every 50 ms, or a quarter window when that is less.
    assert_eq!(overlap_step(ms(400), ms(1_000)), ms(50));
    assert_eq!(overlap_step(ms(100), ms(1_000)), ms(25));
}

fn every(secs: u64, catch_up: Option<u64>) -> Cadence {
    Cadence {
        schedule: Schedule::every(Duration::from_secs(secs))
            .compile()
            .unwrap(),
        catch_up: catch_up.map(Duration::from_secs),
        jitter: Duration::ZERO,
        holder_prefix: "node-1:1".into(),
        policy: Policy::default(),
        fenced: false,
    }
}

const Z: TimeDelta = TimeDelta::zero();

const POLL: Polling = Polling {
    overlap: Duration::from_millis(500),
    same_tick: Duration::from_secs(1),
    ttl: Duration::from_secs(20),
};

fn lease(tick: Tick, holder: Holder) -> Lease {
    Lease {
        name: LeaseName::new("job").unwrap(),
        holder,
        tick,
        token: FencingToken::new(1),
        expires_at: at(10_000),
    }
}

fn held(tick: i64, expires_ms: i64, completed: bool) -> Held {
    Held {
        name: LeaseName::new("job").unwrap(),
        tick: Tick::new(at(tick)),
        expires_at: ms(expires_ms),
        completed,
    }
}

/// A job every 10 s started at 1000.5 s: the tick at 1000 s is due at once.
fn started() -> (JobTicks, Cadence, Vec<TickEvent>) {
    let c = every(10, None);
    let mut j = JobTicks::default();
    j.start(&c, ms(1_000_500));
    (j, c, Vec::new())
}

#[test]
fn ran_the_latest_tick_at_start_then_each_tick_once() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    assert_eq!(tick, Tick::new(at(1000)));
    assert_eq!(
        j.on_won(lease(tick, holder), ms(1_000_510), &mut ev),
        Won::Run { took_over: false }
    );
    assert!(
        j.due(&c, ms(1_005_000), Z, &mut ev).is_none(),
        "nothing due"
    );
    assert!(j.on_finished().is_some());
    assert_eq!(j.next_wake(Z), Some(at(1010)));
    let (tick, _) = j.due(&c, at(1010), Z, &mut ev).unwrap();
    assert_eq!(tick, Tick::new(at(1010)));
    assert!(ev.is_empty(), "{ev:?}");
}

/// A job another instance owns asks for its next tick only its deferral after the
/// tick's instant, never ahead, and `look_at` never passes that over; at most half
/// the window; undeferred, it asks ahead again.
#[test]
fn a_deferred_tick_is_asked_for_after_its_instant() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    assert!(j.on_finished().is_some());
    let ahead = TimeDelta::milliseconds(300);
    j.set_defer(TimeDelta::milliseconds(500));
    assert_eq!(j.next_wake(ahead), Some(ms(1_010_500)));
    let look = j.look_at(ahead).unwrap();
    assert!(look <= ms(1_010_500), "{look}");
    assert!(
        j.due(&c, ms(1_009_800), ahead, &mut ev).is_none(),
        "not ahead"
    );
    assert!(
        j.due(&c, ms(1_010_499), ahead, &mut ev).is_none(),
        "not before"
    );
    let (tick, _) = j.due(&c, ms(1_010_500), ahead, &mut ev).unwrap();
    assert_eq!(tick, Tick::new(at(1010)));
    // A deferral past half the window waits half the window (5 s of 10).
    let mut k = JobTicks::default();
    k.start(&c, ms(1_000_500));
    k.set_defer(TimeDelta::seconds(60));
    k.pending = None;
    assert_eq!(k.next_wake(Z), Some(at(1015)));
    // No longer deferred: ahead again.
    k.set_defer(Z);
    assert_eq!(k.next_wake(ahead), Some(ms(1_009_700)));
    assert!(ev.is_empty(), "{ev:?}");
}

#[test]
fn a_take_answered_after_the_window_closed_runs_nothing() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    // Sent in time; answered 10.2 s after the tick, past its 10 s window (an
    // outage held the statement up).
    assert_eq!(
        j.on_won(lease(tick, holder.clone()), ms(1_010_200), &mut ev),
        Won::TooLate
    );
    assert!(j.running().is_none(), "nothing runs");
    assert_eq!(
        ev,
        [TickEvent::WonTooLate {
            tick,
            holder,
            late: TimeDelta::milliseconds(10_200)
        }]
    );
    // The next tick is taken as usual.
    ev.clear();
    let (next, _) = j.due(&c, ms(1_010_200), Z, &mut ev).unwrap();
    assert_eq!(next, Tick::new(at(1010)));
}

#[test]
fn a_retried_take_asks_as_the_same_holder() {
    let (mut j, c, mut ev) = started();
    let (_, first) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    // The take failed (no answer): the tick is still pending, same holder.
    let (_, again) = j.due(&c, ms(1_000_700), Z, &mut ev).unwrap();
    assert_eq!(first, again);
    // The next tick gets a holder of its own.
    j.pending = None;
    let (_, next) = j.due(&c, at(1010), Z, &mut ev).unwrap();
    assert_ne!(first, next);
}

#[test]
fn a_dropped_tick_whose_take_went_unanswered_hands_back_its_holder() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_unanswered();
    // The store stays unreachable until the next tick supersedes this one.
    assert!(j.due(&c, at(1010), Z, &mut ev).is_some());
    assert_eq!(
        ev,
        [
            TickEvent::Abandoned { tick, holder },
            TickEvent::Coalesced { tick, count: 1 }
        ]
    );
    // An answered (refused) take clears it: nothing to hand back.
    ev.clear();
    j.on_unanswered();
    j.on_refused(
        Overlap::Skip,
        Some(&held(1010, 1_010_300, true)),
        ms(1_010_010),
        POLL,
        &mut ev,
    );
    assert_eq!(
        ev,
        [TickEvent::HeldElsewhere {
            tick: Tick::new(at(1010))
        }]
    );
}

#[test]
fn held_elsewhere_completed_is_dropped_and_counted_once() {
    let (mut j, c, mut ev) = started();
    j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_refused(
        Overlap::Skip,
        Some(&held(1000, 1_000_300, true)),
        ms(1_000_510),
        POLL,
        &mut ev,
    );
    assert_eq!(
        ev,
        [TickEvent::HeldElsewhere {
            tick: Tick::new(at(1000))
        }]
    );
    assert!(j.due(&c, ms(1_000_600), Z, &mut ev).is_none());
    assert_eq!(j.next_wake(Z), Some(at(1010)));
}

#[test]
fn a_lost_race_does_not_ask_again_at_once() {
    // The row the take read was the previous tick's, released and expired: free
    // for this tick, yet refused — another instance won it in the same instant.
    let (mut j, c, mut ev) = started();
    j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_refused(
        Overlap::Skip,
        Some(&held(990, 991_000, true)),
        ms(1_000_505),
        POLL,
        &mut ev,
    );
    // Window 10 s, same-tick poll 1 s: asks again in a second, not at once.
    assert!(j.due(&c, ms(1_000_600), Z, &mut ev).is_none());
    assert_eq!(j.next_wake(Z), Some(ms(1_001_505)));
    // With a window too short for two polls it waits for the winner's lease
    // (a ttl), which is past the window: the tick is left to the winner.
    let c = every(1, None);
    let mut j = JobTicks::default();
    j.start(&c, ms(1_000_500));
    j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_refused(
        Overlap::Skip,
        Some(&held(999, 999_100, true)),
        ms(1_000_505),
        POLL,
        &mut ev,
    );
    assert!(j.pending.is_none());
}

#[test]
fn this_tick_running_elsewhere_is_retried_at_its_expiry_or_poll() {
    let (mut j, c, mut ev) = started();
    j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_refused(
        Overlap::Skip,
        Some(&held(1000, 1_000_800, false)),
        ms(1_000_510),
        POLL,
        &mut ev,
    );
    assert_eq!(
        j.next_wake(Z),
        Some(ms(1_000_800)),
        "its expiry comes first"
    );
    // Expired unreleased (its holder crashed): the retry may win.
    assert!(j.due(&c, ms(1_000_800), Z, &mut ev).is_some());
    j.on_refused(
        Overlap::Skip,
        Some(&held(1000, 1_008_000, false)),
        ms(1_000_810),
        POLL,
        &mut ev,
    );
    assert_eq!(j.next_wake(Z), Some(ms(1_001_810)), "then the poll");
    // A retry past the window drops the tick.
    j.on_refused(
        Overlap::Skip,
        Some(&held(1000, 1_020_000, false)),
        ms(1_009_500),
        POLL,
        &mut ev,
    );
    assert!(j.pending.is_none());
    assert_eq!(ev.len(), 1, "held elsewhere is counted once: {ev:?}");
}

#[test]
fn the_previous_tick_running_elsewhere_is_polled() {
    let (mut j, c, mut ev) = started();
    j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_refused(
        Overlap::Skip,
        Some(&held(990, 1_030_000, false)),
        ms(1_000_510),
        POLL,
        &mut ev,
    );
    assert_eq!(j.next_wake(Z), Some(ms(1_001_010)));
}

#[test]
fn a_tick_due_while_the_previous_run_holds_the_lease_is_skipped() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    assert!(j.due(&c, at(1010), Z, &mut ev).is_none());
    assert_eq!(
        ev,
        [TickEvent::SkippedOverlap {
            tick: Tick::new(at(1010)),
            running: Tick::new(at(1000))
        }]
    );
}

#[test]
fn ticks_never_attempted_are_coalesced_when_superseded_or_missed_when_late() {
    let (mut j, c, mut ev) = started();
    // An outage: nothing was asked for 35 s. The latest tick runs in place of
    // the three before it (catch-up Latest, the default).
    let (tick, _) = j.due(&c, ms(1_035_000), Z, &mut ev).unwrap();
    assert_eq!(tick, Tick::new(at(1030)));
    assert_eq!(
        ev,
        [TickEvent::Coalesced {
            tick: Tick::new(at(1020)),
            count: 3,
        }]
    );
    ev.clear();
    // Its window (one period) closes before it could be asked again.
    j.next = None;
    assert!(j.due(&c, ms(1_040_001), Z, &mut ev).is_none());
    assert_eq!(
        ev,
        [TickEvent::Missed {
            tick: Tick::new(at(1030)),
            count: 1,
            superseded: false
        }]
    );
}

/// A job every 10 s with a 50 s window and catch-up policy `catch_up`, started
/// at 1045.5 s after every instance was down since 1000 s.
fn after_downtime(catch_up: CatchUp) -> (JobTicks, Cadence, Vec<TickEvent>) {
    let mut c = every(10, Some(50));
    c.policy = Policy::default().catch_up(catch_up);
    let mut j = JobTicks::default();
    j.start(&c, ms(1_045_500));
    (j, c, Vec::new())
}

/// Takes, wins and finishes each tick `j` offers at `now`, in order.
fn run_all(j: &mut JobTicks, c: &Cadence, now: DateTime<Utc>) -> Vec<i64> {
    let mut ran = Vec::new();
    let mut ev = Vec::new();
    while let Some((tick, holder)) = j.due(c, now, Z, &mut ev) {
        assert_eq!(
            j.on_won(lease(tick, holder), now, &mut ev),
            Won::Run { took_over: false }
        );
        j.on_finished();
        ran.push(tick.at().timestamp());
    }
    ran
}

#[test]
fn after_downtime_skip_runs_none_latest_one_and_all_the_most_recent_max() {
    let (mut j, c, _) = after_downtime(CatchUp::Skip);
    assert!(run_all(&mut j, &c, ms(1_045_500)).is_empty());
    assert_eq!(j.next_wake(Z), Some(at(1050)));

    let (mut j, c, _) = after_downtime(CatchUp::Latest);
    assert_eq!(run_all(&mut j, &c, ms(1_045_500)), [1040]);

    // Ticks 1000..=1040 within the window: the most recent three, oldest first.
    let (mut j, c, _) = after_downtime(CatchUp::All { max: 3 });
    assert_eq!(run_all(&mut j, &c, ms(1_045_500)), [1020, 1030, 1040]);
    assert_eq!(j.next_wake(Z), Some(at(1050)));
}

#[test]
fn during_an_outage_skip_misses_latest_coalesces_and_all_queues_up_to_max() {
    let outage = |catch_up| {
        let mut c = every(10, Some(50));
        c.policy = Policy::default().catch_up(catch_up);
        let mut j = JobTicks::default();
        j.start(&c, ms(999_500));
        // The ticks before the start, if the policy catches up on any, run first.
        run_all(&mut j, &c, ms(999_500));
        let mut ev = Vec::new();
        // Tick 1000 is asked for; the store does not answer until 1045 s.
        j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
        j.on_unanswered();
        let ran = run_all(&mut j, &c, ms(1_045_000));
        let mut ev = Vec::new();
        j.due(&c, ms(1_045_000), Z, &mut ev);
        (ran, ev)
    };
    let (ran, _) = outage(CatchUp::Skip);
    assert_eq!(ran, [1040]);
    let (ran, _) = outage(CatchUp::Latest);
    assert_eq!(ran, [1040]);
    let (ran, _) = outage(CatchUp::All { max: 3 });
    assert_eq!(ran, [1020, 1030, 1040]);

    // What was passed over is counted by policy.
    let passed = |catch_up| {
        let mut c = every(10, Some(50));
        c.policy = Policy::default().catch_up(catch_up);
        let mut j = JobTicks::default();
        j.start(&c, ms(999_500));
        // The ticks before the start, if the policy catches up on any, run first.
        run_all(&mut j, &c, ms(999_500));
        let mut ev = Vec::new();
        j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
        ev.clear();
        j.due(&c, ms(1_045_000), Z, &mut ev);
        ev
    };
    let t = |s| Tick::new(at(s));
    assert_eq!(
        passed(CatchUp::Skip),
        [TickEvent::Missed {
            tick: t(1030),
            count: 4,
            superseded: true
        }]
    );
    assert_eq!(
        passed(CatchUp::Latest),
        [TickEvent::Coalesced {
            tick: t(1030),
            count: 4
        }]
    );
    assert_eq!(
        passed(CatchUp::All { max: 3 }),
        [TickEvent::Missed {
            tick: t(1010),
            count: 2,
            superseded: true
        }]
    );
}

#[test]
fn cancel_running_cancels_a_run_here_at_once_and_asks_one_elsewhere_once() {
    // Here: the tick due during the run cancels it and waits for it to end.
    let (mut j, mut c, mut ev) = started();
    c.policy = Policy::default().overlap(Overlap::CancelRunning);
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    assert!(j.due(&c, ms(1_010_000), Z, &mut ev).is_none());
    let t = |s| Tick::new(at(s));
    assert_eq!(
        ev,
        [TickEvent::CancelledByNewer {
            tick: t(1000),
            newer: t(1010)
        }]
    );
    let run = j.running().unwrap();
    assert!(run.superseded && run.cancelled);
    assert_eq!(
        j.take_commands(),
        [Command::CancelRun],
        "the driver cancels the run"
    );
    j.on_finished();
    let (tick, _) = j.due(&c, ms(1_010_100), Z, &mut ev).unwrap();
    assert_eq!(tick, t(1010));

    // Elsewhere: a take refused because an older tick still runs asks its holder
    // to stop, once; then polls as usual.
    let (mut j, mut c, mut ev) = started();
    c.policy = Policy::default().overlap(Overlap::CancelRunning);
    j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    for _ in 0..2 {
        j.on_refused(
            Overlap::CancelRunning,
            Some(&held(990, 1_003_000, false)),
            ms(1_000_510),
            POLL,
            &mut ev,
        );
    }
    assert_eq!(
        ev,
        [
            TickEvent::HeldElsewhere { tick: t(1000) },
            TickEvent::AskCancel { newer: t(1000) }
        ]
    );
    // Its own renewal tells a holder it was asked: cancelled, once.
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    assert!(j.on_cancel_requested().is_some());
    assert!(j.on_cancel_requested().is_none(), "news once");
    assert!(j.running().unwrap().cancelled);
}

#[test]
fn a_buffered_tick_gives_way_to_a_newer_one_that_came_due_before_the_loop_looked() {
    let (mut j, mut c, mut ev) = started();
    c.policy = Policy::default().overlap(Overlap::BufferOne);
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    // 1010 and 1020 come due during the run: 1020 waits.
    assert!(j.due(&c, ms(1_025_000), Z, &mut ev).is_none());
    // The run ends at 1029.9 s, but the loop looks again only at 1030.2 s, when
    // 1030 is due too: 1030 runs, in place of the older buffered 1020 (which
    // used to replace it, and then miss its own window: nothing ran).
    j.on_finished();
    ev.clear();
    let (tick, _) = j.due(&c, ms(1_030_200), Z, &mut ev).unwrap();
    assert_eq!(tick, Tick::new(at(1030)));
    assert_eq!(
        ev,
        [TickEvent::Coalesced {
            tick: Tick::new(at(1020)),
            count: 1
        }]
    );
}

#[test]
fn buffer_one_runs_the_latest_tick_due_during_a_run_once_it_ends() {
    let (mut j, mut c, mut ev) = started();
    c.policy = Policy::default().overlap(Overlap::BufferOne);
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    // Ticks 1010 and 1020 come due while the run goes on: 1020 waits, 1010 is
    // skipped.
    assert!(j.due(&c, ms(1_025_000), Z, &mut ev).is_none());
    assert_eq!(
        ev,
        [TickEvent::SkippedOverlap {
            tick: Tick::new(at(1010)),
            running: Tick::new(at(1000))
        }]
    );
    assert_eq!(
        j.next_wake(Z),
        Some(at(1030)),
        "nothing to take while the run holds the job"
    );
    j.on_finished();
    assert_eq!(
        j.next_wake(Z),
        Some(at(1020)),
        "the buffered tick is due at once"
    );
    let (tick, _) = j.due(&c, ms(1_025_100), Z, &mut ev).unwrap();
    assert_eq!(tick, Tick::new(at(1020)));
}

#[test]
fn a_lost_lease_is_reported_once_and_never_renewed() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    assert!(j.expired_unrenewed(at(10_000)));
    assert!(j.on_lost(false).is_some());
    // A duplicate is harmless: only an attempt not begun yet is stopped.
    assert_eq!(j.take_commands(), [Command::CancelUnbegun]);
    assert!(j.on_lost(false).is_none(), "reported once");
    assert!(j.take_commands().is_empty());
    assert!(!j.expired_unrenewed(at(10_000)));
    assert!(j.on_finished().is_some_and(|r| r.lost));
}

#[test]
fn a_lost_lease_of_a_job_that_needs_fencing_cancels_its_run() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    assert!(j.on_lost(true).is_some());
    assert_eq!(
        j.take_commands(),
        [Command::CancelUnbegun, Command::CancelRun]
    );
    assert!(j.running().is_some_and(|r| r.cancelled && r.lost));
    // Neither retried nor released when it ends.
    let c = Cadence {
        policy: Policy::default().retry(3, std::time::Duration::from_secs(1)),
        ..c
    };
    match j.on_attempt_ended(&c, Ended::Failed, ms(1_000_600), false) {
        AttemptEnd::Ended { run, end, .. } => {
            assert!(run.lost);
            assert_eq!(end.handover, crate::runtime::decide::Handover::Keep);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failed_attempt_whose_lease_expired_unrenewed_is_lost_not_retried() {
    let (mut j, c, mut ev) = started();
    let c = Cadence {
        policy: Policy::default().retry(3, std::time::Duration::from_secs(1)),
        fenced: true,
        ..c
    };
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    // Its task cancelled it at the expiry.
    j.on_expired();
    match j.on_attempt_ended(&c, Ended::Failed, ms(1_000_600), false) {
        AttemptEnd::Ended { lost, run, end } => {
            assert!(lost && run.lost);
            assert_eq!(end.outcome, crate::outcome::Outcome::Cancelled);
        }
        other => panic!("{other:?}"),
    }
    assert!(j.take_commands().contains(&Command::CancelRun));
}

#[test]
fn waiting_for_an_older_tick_elsewhere_is_not_a_takeover() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    // Refused: tick 990 still runs elsewhere until 1000.6 s.
    j.on_refused(
        Overlap::Skip,
        Some(&held(990, 1_000_600, false)),
        ms(1_000_510),
        POLL,
        &mut ev,
    );
    assert!(j.due(&c, ms(1_000_600), Z, &mut ev).is_some());
    assert_eq!(
        j.on_won(lease(tick, holder), ms(1_000_610), &mut ev),
        Won::Run { took_over: false },
        "nobody held this tick: the log must not say it was taken over"
    );
}

#[test]
fn a_takeover_is_recognised() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_refused(
        Overlap::Skip,
        Some(&held(1000, 1_000_600, false)),
        ms(1_000_510),
        POLL,
        &mut ev,
    );
    assert!(j.due(&c, ms(1_000_600), Z, &mut ev).is_some());
    assert_eq!(
        j.on_won(lease(tick, holder), ms(1_000_610), &mut ev),
        Won::Run { took_over: true },
        "took over"
    );
}

#[test]
fn a_tick_is_taken_ahead_and_its_run_begins_at_its_fire_time() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    j.on_finished();
    let ahead = TimeDelta::milliseconds(500);
    assert_eq!(j.next_wake(ahead), Some(ms(1_009_500)));
    assert!(j.due(&c, ms(1_009_400), ahead, &mut ev).is_none());
    let (tick, holder) = j.due(&c, ms(1_009_500), ahead, &mut ev).unwrap();
    assert_eq!(tick, Tick::new(at(1010)));
    j.on_won(lease(tick, holder), ms(1_009_600), &mut ev);
    assert_eq!(j.running().map(|r| r.started), Some(at(1010)));
    assert!(ev.is_empty(), "{ev:?}");
}

#[test]
fn no_tick_is_taken_ahead_while_the_previous_run_holds_the_lease() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    let ahead = TimeDelta::milliseconds(500);
    assert_eq!(j.next_wake(ahead), Some(at(1010)), "not ahead");
    assert!(j.due(&c, ms(1_009_600), ahead, &mut ev).is_none());
    assert!(
        ev.is_empty(),
        "nothing decided before the tick fires: {ev:?}"
    );
    // Still running when it fires: skipped, as without taking ahead.
    assert!(j.due(&c, at(1010), ahead, &mut ev).is_none());
    assert!(
        matches!(ev[..], [TickEvent::SkippedOverlap { .. }]),
        "{ev:?}"
    );
}

#[test]
fn taking_ahead_is_bounded_by_half_the_window() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_won(lease(tick, holder), ms(1_000_510), &mut ev);
    j.on_finished();
    // A 10 s window: at most 5 s ahead, whatever the engine asks.
    let ahead = TimeDelta::seconds(60);
    assert_eq!(j.next_wake(ahead), Some(ms(1_005_000)));
    assert!(j.due(&c, ms(1_004_999), ahead, &mut ev).is_none());
    assert!(j.due(&c, ms(1_005_000), ahead, &mut ev).is_some());
}

// Every policy × every event (issue 16). A job every 10 s driven one event at a
// time through `Drive`. `ROWS` spells out, for each of the nine combinations of a
// catch-up and an overlap policy, what it does where the policies differ; the
// `…_under_every_policy` tests check what all nine do alike. A panicked or timed
// out run reaches the state machine as a failed one (the same `retry` call).

fn policy(catch_up: CatchUp, overlap: Overlap) -> Policy {
    Policy::default().catch_up(catch_up).overlap(overlap)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Every catch-up policy with every overlap policy, in `ROWS` order.
fn combinations() -> Vec<(CatchUp, Overlap)> {
    let overlaps = [Overlap::Skip, Overlap::BufferOne, Overlap::CancelRunning];
    [CatchUp::Skip, CatchUp::Latest, CatchUp::All { max: 3 }]
        .into_iter()
        .flat_map(|c| overlaps.map(|o| (c, o)))
        .collect()
}

/// A [`TickEvent`] as the tables write it: ticks in seconds, and no holder (it is
/// the one every take of its tick asked as).
#[derive(Debug, Clone, Copy)]
enum Ev {
    /// `Missed(tick)`, not superseded: its window closed.
    Missed(i64),
    /// `Superseded(last, count)`: `Missed`, superseded, `last` the latest of
    /// `count` ticks passed over.
    Superseded(i64, u64),
    /// `Coalesced(last, count)`.
    Coalesced(i64, u64),
    /// `Skipped(tick, running)`: `SkippedOverlap`.
    Skipped(i64, i64),
    /// `HeldElsewhere(tick)`.
    HeldElsewhere(i64),
    /// `Abandoned(tick)`.
    Abandoned(i64),
    /// `CancelledByNewer(tick, newer)`.
    CancelledByNewer(i64, i64),
    /// `AskCancel(newer)`.
    AskCancel(i64),
    /// `WonTooLate(tick, late_ms)`.
    WonTooLate(i64, i64),
}

/// One job driven event by event, times in milliseconds on the store's clock:
/// every 10 s with a catch-up window of `window` seconds, started at 999.5 s with
/// whatever its catch-up policy runs at start-up already run, so that tick
/// 1000 s comes next under every policy.
struct Drive {
    j: JobTicks,
    c: Cadence,
    ev: Vec<TickEvent>,
    /// Every tick (s) asked for, with the holder it asked as.
    asked: Vec<(i64, Holder)>,
    /// The policies, for messages.
    name: String,
}

impl Drive {
    fn new(policy: Policy, window: u64) -> Self {
        let mut c = every(10, Some(window));
        c.policy = policy;
        let mut j = JobTicks::default();
        j.start(&c, ms(999_500));
        run_all(&mut j, &c, ms(999_500));
        assert_eq!(j.next_wake(Z), Some(at(1000)));
        let name = format!("catch-up {}, overlap {}", policy.catch_up, policy.overlap);
        Self {
            j,
            c,
            ev: Vec::new(),
            asked: Vec::new(),
            name,
        }
    }

    /// Asks for a tick at `now`: the tick (s) to take, if any.
    fn take(&mut self, now: i64) -> Option<i64> {
        let (tick, holder) = self.j.due(&self.c, ms(now), Z, &mut self.ev)?;
        let tick = tick.at().timestamp();
        self.asked.push((tick, holder));
        Some(tick)
    }

    /// The holder every take of `tick` (s) asked as.
    fn holder_of(&self, tick: i64) -> Holder {
        let mut holders = self.asked.iter().filter(|(t, _)| *t == tick);
        let (_, first) = holders.next().expect("the tick was asked for");
        assert!(
            holders.all(|(_, h)| h == first),
            "{}: every take of tick {tick} asks as one holder",
            self.name
        );
        first.clone()
    }

    /// The last take is granted, the answer coming at `now`.
    fn win(&mut self, now: i64) -> Won {
        let (tick, holder) = self.asked.last().cloned().unwrap();
        self.j
            .on_won(lease(Tick::new(at(tick)), holder), ms(now), &mut self.ev)
    }

    /// The last take is refused, the answer coming at `now` with the lease's row
    /// as `held`.
    fn refuse(&mut self, held: &Held, now: i64) {
        let overlap = self.c.policy.overlap;
        self.j
            .on_refused(overlap, Some(held), ms(now), POLL, &mut self.ev);
    }

    /// The run failed (or panicked, or timed out) at `now`: its retry, if any.
    fn fail(&mut self, now: i64) -> Option<(u32, Duration)> {
        self.j.retry(&self.c, ms(now))
    }

    /// Takes every tick due at `now`, wins it at once and ends its run: the ticks
    /// (s) run, in order.
    fn run_due(&mut self, now: i64) -> Vec<i64> {
        let mut ran = Vec::new();
        while let Some(tick) = self.take(now) {
            let won = self.win(now);
            assert!(matches!(won, Won::Run { .. }), "{}: {won:?}", self.name);
            self.j.on_finished();
            ran.push(tick);
        }
        ran
    }

    /// When the job next needs the loop (ms).
    fn wake(&self) -> Option<i64> {
        self.j.next_wake(Z).map(|w| w.timestamp_millis())
    }

    /// Asserts that the events since the last call were exactly `expected`.
    #[track_caller]
    fn events(&mut self, expected: &[Ev], what: &str) {
        let t = |s: i64| Tick::new(at(s));
        let expected: Vec<_> = expected
            .iter()
            .map(|e| match *e {
                Ev::Missed(tick) => TickEvent::Missed {
                    tick: t(tick),
                    count: 1,
                    superseded: false,
                },
                Ev::Superseded(tick, count) => TickEvent::Missed {
                    tick: t(tick),
                    count,
                    superseded: true,
                },
                Ev::Coalesced(tick, count) => TickEvent::Coalesced {
                    tick: t(tick),
                    count,
                },
                Ev::Skipped(tick, running) => TickEvent::SkippedOverlap {
                    tick: t(tick),
                    running: t(running),
                },
                Ev::HeldElsewhere(tick) => TickEvent::HeldElsewhere { tick: t(tick) },
                Ev::Abandoned(tick) => TickEvent::Abandoned {
                    tick: t(tick),
                    holder: self.holder_of(tick),
                },
                Ev::CancelledByNewer(tick, newer) => TickEvent::CancelledByNewer {
                    tick: t(tick),
                    newer: t(newer),
                },
                Ev::AskCancel(newer) => TickEvent::AskCancel { newer: t(newer) },
                Ev::WonTooLate(tick, late_ms) => TickEvent::WonTooLate {
                    tick: t(tick),
                    holder: self.holder_of(tick),
                    late: TimeDelta::milliseconds(late_ms),
                },
            })
            .collect();
        let seen = std::mem::take(&mut self.ev);
        assert_eq!(seen, expected, "{}: {what}", self.name);
    }
}

/// What one combination of policies does where the policies make a difference:
/// a job every 10 s with a 25 s catch-up window ([`Drive`]), so a tick outlives
/// the next one.
struct Row {
    catch_up: CatchUp,
    overlap: Overlap,
    /// Started at 1045.5 s, every instance down since 1000 s (a 50 s window,
    /// [`after_downtime`]): the ticks run at once.
    after_downtime: &'static [i64],
    /// Ticks 1010 and 1020 come due while tick 1000 runs here: the events of each.
    during_run: [&'static [Ev]; 2],
    /// Whether the run is cancelled for them (its token fires, it is superseded).
    cancels_run: bool,
    /// The same while the run's lease is lost (a lost run is never cancelled).
    during_lost_run: [&'static [Ev]; 2],
    /// The tick taken when that run ends, at 1021 s (lost or not).
    after_run: Option<i64>,
    /// Tick 1000 refused twice because tick 990 still runs elsewhere: the events.
    older_elsewhere: &'static [Ev],
    /// Tick 1000's take unanswered from 1000.5 s until 1026 s, past its window
    /// (ticks 1010 and 1020 came due meanwhile): the events then…
    outage: &'static [Ev],
    /// …and the ticks run then, in order.
    outage_runs: &'static [i64],
}

const ROWS: [Row; 9] = [
    Row {
        catch_up: CatchUp::Skip,
        overlap: Overlap::Skip,
        after_downtime: &[],
        during_run: [&[Ev::Skipped(1010, 1000)], &[Ev::Skipped(1020, 1000)]],
        cancels_run: false,
        during_lost_run: [&[Ev::Skipped(1010, 1000)], &[Ev::Skipped(1020, 1000)]],
        after_run: None,
        older_elsewhere: &[Ev::HeldElsewhere(1000)],
        outage: &[Ev::Abandoned(1000), Ev::Superseded(1010, 2)],
        outage_runs: &[1020],
    },
    Row {
        catch_up: CatchUp::Skip,
        overlap: Overlap::BufferOne,
        after_downtime: &[],
        during_run: [&[], &[Ev::Skipped(1010, 1000)]],
        cancels_run: false,
        during_lost_run: [&[], &[Ev::Skipped(1010, 1000)]],
        after_run: Some(1020),
        older_elsewhere: &[Ev::HeldElsewhere(1000)],
        outage: &[Ev::Abandoned(1000), Ev::Superseded(1010, 2)],
        outage_runs: &[1020],
    },
    Row {
        catch_up: CatchUp::Skip,
        overlap: Overlap::CancelRunning,
        after_downtime: &[],
        during_run: [
            &[Ev::CancelledByNewer(1000, 1010)],
            &[Ev::Skipped(1010, 1000)],
        ],
        cancels_run: true,
        during_lost_run: [&[], &[Ev::Skipped(1010, 1000)]],
        after_run: Some(1020),
        older_elsewhere: &[Ev::HeldElsewhere(1000), Ev::AskCancel(1000)],
        outage: &[Ev::Abandoned(1000), Ev::Superseded(1010, 2)],
        outage_runs: &[1020],
    },
    Row {
        catch_up: CatchUp::Latest,
        overlap: Overlap::Skip,
        after_downtime: &[1040],
        during_run: [&[Ev::Skipped(1010, 1000)], &[Ev::Skipped(1020, 1000)]],
        cancels_run: false,
        during_lost_run: [&[Ev::Skipped(1010, 1000)], &[Ev::Skipped(1020, 1000)]],
        after_run: None,
        older_elsewhere: &[Ev::HeldElsewhere(1000)],
        outage: &[Ev::Abandoned(1000), Ev::Coalesced(1010, 2)],
        outage_runs: &[1020],
    },
    Row {
        catch_up: CatchUp::Latest,
        overlap: Overlap::BufferOne,
        after_downtime: &[1040],
        during_run: [&[], &[Ev::Skipped(1010, 1000)]],
        cancels_run: false,
        during_lost_run: [&[], &[Ev::Skipped(1010, 1000)]],
        after_run: Some(1020),
        older_elsewhere: &[Ev::HeldElsewhere(1000)],
        outage: &[Ev::Abandoned(1000), Ev::Coalesced(1010, 2)],
        outage_runs: &[1020],
    },
    Row {
        catch_up: CatchUp::Latest,
        overlap: Overlap::CancelRunning,
        after_downtime: &[1040],
        during_run: [
            &[Ev::CancelledByNewer(1000, 1010)],
            &[Ev::Skipped(1010, 1000)],
        ],
        cancels_run: true,
        during_lost_run: [&[], &[Ev::Skipped(1010, 1000)]],
        after_run: Some(1020),
        older_elsewhere: &[Ev::HeldElsewhere(1000), Ev::AskCancel(1000)],
        outage: &[Ev::Abandoned(1000), Ev::Coalesced(1010, 2)],
        outage_runs: &[1020],
    },
    Row {
        catch_up: CatchUp::All { max: 3 },
        overlap: Overlap::Skip,
        after_downtime: &[1020, 1030, 1040],
        during_run: [&[Ev::Skipped(1010, 1000)], &[Ev::Skipped(1020, 1000)]],
        cancels_run: false,
        during_lost_run: [&[Ev::Skipped(1010, 1000)], &[Ev::Skipped(1020, 1000)]],
        after_run: None,
        older_elsewhere: &[Ev::HeldElsewhere(1000)],
        outage: &[Ev::Missed(1000), Ev::Abandoned(1000)],
        outage_runs: &[1010, 1020],
    },
    Row {
        catch_up: CatchUp::All { max: 3 },
        overlap: Overlap::BufferOne,
        after_downtime: &[1020, 1030, 1040],
        during_run: [&[], &[Ev::Skipped(1010, 1000)]],
        cancels_run: false,
        during_lost_run: [&[], &[Ev::Skipped(1010, 1000)]],
        after_run: Some(1020),
        older_elsewhere: &[Ev::HeldElsewhere(1000)],
        outage: &[Ev::Missed(1000), Ev::Abandoned(1000)],
        outage_runs: &[1010, 1020],
    },
    Row {
        catch_up: CatchUp::All { max: 3 },
        overlap: Overlap::CancelRunning,
        after_downtime: &[1020, 1030, 1040],
        during_run: [
            &[Ev::CancelledByNewer(1000, 1010)],
            &[Ev::Skipped(1010, 1000)],
        ],
        cancels_run: true,
        during_lost_run: [&[], &[Ev::Skipped(1010, 1000)]],
        after_run: Some(1020),
        older_elsewhere: &[Ev::HeldElsewhere(1000), Ev::AskCancel(1000)],
        outage: &[Ev::Missed(1000), Ev::Abandoned(1000)],
        outage_runs: &[1010, 1020],
    },
];

#[test]
fn every_catch_up_policy_by_every_overlap_policy() {
    let listed: Vec<_> = ROWS.iter().map(|r| (r.catch_up, r.overlap)).collect();
    assert_eq!(listed, combinations(), "one row per combination");
    for row in &ROWS {
        let p = policy(row.catch_up, row.overlap);

        let (mut j, mut c, _) = after_downtime(row.catch_up);
        c.policy = p;
        assert_eq!(
            run_all(&mut j, &c, ms(1_045_500)),
            row.after_downtime,
            "catch-up {}, overlap {}: after downtime",
            row.catch_up,
            row.overlap
        );

        // Ticks 1010 and 1020 come due while tick 1000 runs here, until 1021 s.
        for lost in [false, true] {
            let mut d = Drive::new(p, 25);
            assert_eq!(d.take(1_000_500), Some(1000));
            d.win(1_000_510);
            if lost {
                assert!(d.j.on_lost(false).is_some());
            }
            let expected = if lost {
                row.during_lost_run
            } else {
                row.during_run
            };
            for (now, expected) in [1_010_000, 1_020_000].into_iter().zip(expected) {
                assert_eq!(d.take(now), None, "{}: the run holds the job", d.name);
                d.events(expected, &format!("due at {now} ms, lost: {lost}"));
            }
            let run = d.j.running().unwrap();
            let cancelled = row.cancels_run && !lost;
            assert_eq!(run.cancelled, cancelled, "{}", d.name);
            assert_eq!(run.superseded, cancelled, "{}", d.name);
            d.j.on_finished();
            assert_eq!(d.take(1_021_000), row.after_run, "{}: ended", d.name);
            d.events(&[], "the run ended");
        }

        // Tick 990 still runs elsewhere: polled every 0.5 s (sooner than its
        // expiry), and asked to stop once if the newest tick wins.
        let mut d = Drive::new(p, 25);
        let older = held(990, 1_003_000, false);
        for (now, wake) in [(1_000_510, 1_001_010), (1_001_010, 1_001_510)] {
            assert_eq!(d.take(now), Some(1000), "{}", d.name);
            d.refuse(&older, now);
            assert_eq!(d.wake(), Some(wake), "{}: refused at {now} ms", d.name);
        }
        d.events(row.older_elsewhere, "an older tick runs elsewhere");
        // It ended there: the next poll wins.
        assert_eq!(d.take(1_001_510), Some(1000), "{}", d.name);
        let won = d.win(1_001_520);
        assert!(matches!(won, Won::Run { .. }), "{}: {won:?}", d.name);

        // An outage past the window of the tick whose take went unanswered.
        let mut d = Drive::new(p, 25);
        assert_eq!(d.take(1_000_500), Some(1000));
        d.j.on_unanswered();
        assert_eq!(d.run_due(1_026_000), row.outage_runs, "{}", d.name);
        d.events(row.outage, "an outage from 1000.5 s to 1026 s");
    }
}

#[test]
fn a_won_take_runs_its_tick_under_every_policy() {
    for (catch_up, overlap) in combinations() {
        let mut d = Drive::new(policy(catch_up, overlap), 25);
        assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
        assert_eq!(d.win(1_000_510), Won::Run { took_over: false });
        let run = d.j.running().unwrap();
        assert_eq!(run.lease.tick, Tick::new(at(1000)));
        assert_eq!(
            run.started,
            ms(1_000_510),
            "{}: begins when answered",
            d.name
        );
        assert_eq!(run.attempt, 1);
        assert!(!run.lost && !run.superseded && !run.cancelled);
        assert_eq!(d.take(1_005_000), None, "{}: nothing else to take", d.name);
        assert_eq!(d.wake(), Some(1_010_000), "{}: the next tick", d.name);
        assert!(d.j.on_finished().is_some());
        assert_eq!(d.take(1_010_000), Some(1010), "{}", d.name);
        assert_ne!(d.holder_of(1010), d.holder_of(1000), "a holder per tick");
        d.events(&[], "a run and the next take");
    }
}

#[test]
fn this_tick_held_elsewhere_is_polled_until_its_expiry_under_every_policy() {
    for (catch_up, overlap) in combinations() {
        // Held by another holder until 1003 s: asked again every second (a 5 s
        // window leaves room for two polls), then at its expiry, and taken over.
        let mut d = Drive::new(policy(catch_up, overlap), 5);
        let elsewhere = held(1000, 1_003_000, false);
        for (now, wake) in [
            (1_000_510, 1_001_510),
            (1_001_510, 1_002_510),
            (1_002_510, 1_003_000),
        ] {
            assert_eq!(d.take(now), Some(1000), "{}", d.name);
            d.refuse(&elsewhere, now);
            assert_eq!(d.wake(), Some(wake), "{}: refused at {now} ms", d.name);
            assert_eq!(d.take(wake - 1), None, "{}: not before", d.name);
        }
        assert_eq!(d.take(1_003_000), Some(1000), "{}", d.name);
        assert_eq!(d.win(1_003_010), Won::Run { took_over: true });
        assert_eq!(d.j.running().unwrap().started, ms(1_003_010));
        assert_eq!(d.asked.len(), 4);
        d.holder_of(1000);
        d.events(&[Ev::HeldElsewhere(1000)], "counted once");

        // Held past its window: polled until the next poll would fall past the
        // window, then left to its holder (not missed: it runs there).
        let mut d = Drive::new(policy(catch_up, overlap), 5);
        let elsewhere = held(1000, 1_020_000, false);
        for now in [1_000_510, 1_001_510, 1_002_510, 1_003_510, 1_004_510] {
            assert_eq!(d.take(now), Some(1000), "{}", d.name);
            d.refuse(&elsewhere, now);
        }
        assert_eq!(d.wake(), Some(1_010_000), "{}: dropped", d.name);
        assert_eq!(d.take(1_004_600), None, "{}", d.name);
        d.events(&[Ev::HeldElsewhere(1000)], "held elsewhere past its window");
        assert_eq!(d.take(1_010_000), Some(1010), "{}", d.name);
    }
}

#[test]
fn a_tick_done_elsewhere_is_dropped_under_every_policy() {
    for (catch_up, overlap) in combinations() {
        for (row, what) in [
            (held(1000, 1_000_300, true), "completed elsewhere"),
            (
                held(1010, 1_020_000, false),
                "a later tick taken (a clock ahead)",
            ),
        ] {
            let mut d = Drive::new(policy(catch_up, overlap), 5);
            assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
            d.refuse(&row, 1_000_510);
            d.events(&[Ev::HeldElsewhere(1000)], what);
            assert_eq!(d.take(1_000_600), None, "{}: {what}", d.name);
            assert_eq!(d.wake(), Some(1_010_000), "{}: {what}", d.name);
            assert_eq!(d.take(1_010_000), Some(1010), "{}: {what}", d.name);
            d.events(&[], what);
        }
    }
}

#[test]
fn a_lost_lease_is_neither_renewed_nor_retried_under_every_policy() {
    for (catch_up, overlap) in combinations() {
        let p = policy(catch_up, overlap).retry(2, secs(1));
        let mut d = Drive::new(p, 25);
        assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
        d.win(1_000_510);
        d.j.on_renewed(ms(1_005_000));
        assert!(!d.j.expired_unrenewed(ms(1_004_999)), "{}", d.name);
        assert!(d.j.expired_unrenewed(ms(1_005_000)), "{}", d.name);
        assert!(d.j.on_lost(false).is_some(), "{}", d.name);
        assert!(d.j.on_lost(false).is_none(), "{}: reported once", d.name);
        // The engine renews only runs not lost, and looks for expiry among them.
        assert!(d.j.running().unwrap().lost);
        assert!(!d.j.expired_unrenewed(ms(1_005_000)), "{}", d.name);
        assert!(d.j.on_cancel_requested().is_none(), "{}", d.name);
        assert_eq!(d.fail(1_006_000), None, "{}: no retry", d.name);
        let run = d.j.on_finished().unwrap();
        assert!(run.lost && run.attempt == 1 && !run.cancelled);
        assert_eq!(d.take(1_010_000), Some(1010), "{}: the next tick", d.name);
        d.events(&[], "a lost lease");
    }
}

#[test]
fn a_failed_run_is_retried_before_the_next_tick_under_every_policy() {
    for (catch_up, overlap) in combinations() {
        // Two retries, after 1 s then 2 s.
        let p = policy(catch_up, overlap).retry(2, secs(1));
        let mut d = Drive::new(p, 25);
        assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
        d.win(1_000_510);
        assert_eq!(d.fail(1_001_000), Some((2, secs(1))), "{}", d.name);
        assert_eq!(d.j.running().unwrap().started, ms(1_002_000));
        // The second attempt times out: the timeout cancels that attempt's own
        // token, not the run's (the run is not cancelled), so it is a failure like
        // any other.
        assert!(!d.j.running().unwrap().cancelled);
        assert_eq!(d.fail(1_003_000), Some((3, secs(2))), "{}", d.name);
        assert_eq!(d.j.running().unwrap().started, ms(1_005_000));
        // The third panics: no retry left.
        assert_eq!(d.fail(1_006_000), None, "{}: both retries used", d.name);
        assert_eq!(d.j.on_finished().map(|r| r.attempt), Some(3));
        d.events(&[], "retries");

        // No retry at or past the next tick, 1010 s.
        for (failed, retried) in [(1_004_999, true), (1_005_000, false)] {
            let mut d = Drive::new(policy(catch_up, overlap).retry(1, secs(5)), 25);
            assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
            d.win(1_000_510);
            let retry = d.fail(failed);
            assert_eq!(
                retry.is_some(),
                retried,
                "{}: failed at {failed} ms",
                d.name
            );
        }

        // None once the lease is lost, nor once a newer tick asked the run to stop.
        for lost in [true, false] {
            let mut d = Drive::new(p, 25);
            assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
            d.win(1_000_510);
            if lost {
                assert!(d.j.on_lost(false).is_some());
            } else {
                assert!(d.j.on_cancel_requested().is_some());
            }
            assert_eq!(d.fail(1_001_000), None, "{}: lost: {lost}", d.name);
        }
    }
}

#[test]
fn an_unanswered_take_asks_again_as_the_same_holder_under_every_policy() {
    for (catch_up, overlap) in combinations() {
        // No answer three times; due again at once (the loop's own backoff paces
        // the takes), as the same holder; then won within the window, as the take
        // the store may already have applied, not as a takeover.
        let mut d = Drive::new(policy(catch_up, overlap), 25);
        for now in [1_000_500, 1_001_000, 1_003_000] {
            assert_eq!(d.take(now), Some(1000), "{}", d.name);
            d.j.on_unanswered();
            assert_eq!(d.wake(), Some(1_000_000), "{}", d.name);
        }
        assert_eq!(d.take(1_004_000), Some(1000), "{}", d.name);
        assert_eq!(d.asked.len(), 4);
        d.holder_of(1000);
        assert_eq!(d.win(1_004_100), Won::Run { took_over: false });
        d.events(&[], "an outage within the window");

        // No answer until its window closed: missed, and its holder handed back.
        let mut d = Drive::new(policy(catch_up, overlap), 5);
        for now in [1_000_500, 1_004_000] {
            assert_eq!(d.take(now), Some(1000), "{}", d.name);
            d.j.on_unanswered();
        }
        assert_eq!(d.take(1_005_100), None, "{}", d.name);
        d.events(
            &[Ev::Missed(1000), Ev::Abandoned(1000)],
            "an outage past the window",
        );
        assert_eq!(d.wake(), Some(1_010_000), "{}", d.name);
        assert_eq!(d.take(1_010_000), Some(1010), "{}", d.name);
        assert_ne!(d.holder_of(1010), d.holder_of(1000));
    }
}

#[test]
fn a_take_answered_after_its_window_runs_nothing_under_every_policy() {
    for (catch_up, overlap) in combinations() {
        // Answered at the window's last instant: it runs.
        let mut d = Drive::new(policy(catch_up, overlap), 5);
        assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
        assert_eq!(d.win(1_005_000), Won::Run { took_over: false });

        // Answered 5.2 s after the tick, sent once or again after no answer: too
        // late, nothing runs, its lease is to be released unrun (no `Abandoned`).
        for unanswered_first in [false, true] {
            let mut d = Drive::new(policy(catch_up, overlap), 5);
            assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
            if unanswered_first {
                d.j.on_unanswered();
                assert_eq!(d.take(1_003_000), Some(1000), "{}", d.name);
            }
            assert_eq!(d.win(1_005_200), Won::TooLate, "{}", d.name);
            assert!(d.j.running().is_none(), "{}", d.name);
            d.events(&[Ev::WonTooLate(1000, 5_200)], "answered too late");
            assert_eq!(d.take(1_005_300), None, "{}", d.name);
            assert_eq!(d.take(1_010_000), Some(1010), "{}", d.name);
            d.events(&[], "the next tick");
        }
    }
}

#[test]
fn no_retry_starts_past_the_next_tick_once_it_came_due_during_the_run() {
    // `Retry`: "No retry starts at or past the job's next tick". `retry` compares
    // with `next`, the next tick not yet due; once the loop has seen tick 1010 come
    // due during the run (skipped, or buffered behind it), `next` is 1020 and a
    // retry is granted past 1010. Whether a failure at 1010.5 s is retried then
    // depends on whether the loop looked at the job's ticks first.
    for (catch_up, overlap) in combinations() {
        let p = policy(catch_up, overlap).retry(3, secs(1));
        let mut d = Drive::new(p, 25);
        assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
        d.win(1_000_510);
        assert_eq!(
            d.fail(1_010_500),
            None,
            "{}: tick 1010 not seen yet",
            d.name
        );

        let mut d = Drive::new(p, 25);
        assert_eq!(d.take(1_000_500), Some(1000), "{}", d.name);
        d.win(1_000_510);
        assert_eq!(d.take(1_010_000), None, "{}", d.name);
        assert_eq!(
            d.fail(1_010_500),
            None,
            "{}: a retry at 1011.5 s, past tick 1010 come due during the run",
            d.name
        );
    }
}

#[test]
fn a_paused_take_drops_the_tick_as_paused_not_missed() {
    let (mut j, c, mut ev) = started();
    let (tick, _) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_paused(ms(1_000_500), &mut ev);
    assert_eq!(ev, [TickEvent::Paused { tick }]);
    ev.clear();
    // Nothing due until the next tick; the dropped one is not reported again.
    assert_eq!(j.due(&c, ms(1_005_000), Z, &mut ev), None);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(
        j.due(&c, ms(1_010_000), Z, &mut ev).map(|(t, _)| t.at()),
        Some(at(1_010))
    );
}

#[test]
fn a_take_ahead_refused_as_paused_asks_again_at_the_instant() {
    let (mut j, c, mut ev) = started();
    j.due(&c, ms(1_000_500), Z, &mut ev);
    j.on_paused(ms(1_000_500), &mut ev);
    ev.clear();
    // Tick 1010 taken 100 ms ahead, refused as paused: nothing is dropped, and
    // nothing is asked again before its instant.
    let ahead = TimeDelta::milliseconds(100);
    let (tick, holder) = j.due(&c, ms(1_009_900), ahead, &mut ev).unwrap();
    assert_eq!(tick.at(), at(1_010));
    j.on_paused(ms(1_009_900), &mut ev);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(j.due(&c, ms(1_009_950), ahead, &mut ev), None);
    // At its instant it is asked again, as the same holder; refused then, it is
    // dropped as paused.
    assert_eq!(
        j.due(&c, ms(1_010_000), ahead, &mut ev),
        Some((tick, holder))
    );
    j.on_paused(ms(1_010_000), &mut ev);
    assert_eq!(ev, [TickEvent::Paused { tick }]);
}

#[test]
fn a_take_unanswered_then_paused_releases_its_holder() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_unanswered();
    j.on_paused(ms(1_000_500), &mut ev);
    assert_eq!(
        ev,
        [
            TickEvent::Abandoned { tick, holder },
            TickEvent::Paused { tick }
        ]
    );
}

fn resumed(policy: CatchUp) -> Vec<i64> {
    let mut c = every(10, Some(2));
    c.policy = Policy::default().catch_up(policy);
    let mut j = JobTicks::default();
    j.start(&c, ms(1_000_500));
    let mut ev = Vec::new();
    // The start-up tick is paused; then paused until 1,055.5 s.
    j.due(&c, ms(1_000_500), Z, &mut ev);
    j.on_paused(ms(1_000_500), &mut ev);
    j.due(&c, ms(1_055_000), Z, &mut ev);
    while j.pending.is_some() {
        j.on_paused(ms(1_055_000), &mut ev);
        j.due(&c, ms(1_055_000), Z, &mut ev);
    }
    j.on_resumed(&c, at(1_000), ms(1_055_500));
    let mut ticks = Vec::new();
    while let Some((tick, _)) = j.due(&c, ms(1_055_600), Z, &mut ev) {
        ticks.push(tick.at().timestamp());
        j.pending = None;
    }
    ticks
}

#[test]
fn a_resume_catches_up_the_ticks_paused_over_as_the_policy_says() {
    // Ticks 1,000 … 1,050 were paused over (a 2 s window each: long closed).
    assert_eq!(resumed(CatchUp::Latest), [1_050]);
    assert_eq!(resumed(CatchUp::All { max: 3 }), [1_030, 1_040, 1_050]);
    assert!(resumed(CatchUp::Skip).is_empty());
}

#[test]
fn a_resume_adds_nothing_while_a_tick_waits() {
    let (mut j, c, mut ev) = started();
    let (tick, _) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_resumed(&c, at(900), ms(1_000_600));
    assert_eq!(
        j.due(&c, ms(1_000_600), Z, &mut ev).map(|(t, _)| t),
        Some(tick)
    );
    assert!(j.backlog.is_empty());
}

#[test]
fn a_retired_job_takes_no_tick_and_releases_an_unanswered_take() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_unanswered();
    j.retire(&mut ev);
    assert_eq!(
        ev,
        [
            TickEvent::Abandoned { tick, holder },
            TickEvent::Missed {
                tick,
                count: 1,
                superseded: false
            }
        ]
    );
    assert_eq!(j.due(&c, ms(2_000_000), Z, &mut ev), None);
    assert_eq!(j.next_wake(Z), None);
}

#[test]
fn a_schedule_changed_at_noon_does_not_catch_up_its_morning_tick() {
    let c = every(10, Some(60));
    let mut j = JobTicks::default();
    // Ticks at 1,000 … 1,050 are within the window at 1,055.5 s, the latest due
    // at once — unless the row changed after it.
    j.start_after(&c, Some(ms(1_052_000)), ms(1_055_500));
    let mut ev = Vec::new();
    assert_eq!(j.due(&c, ms(1_055_500), Z, &mut ev), None);
    assert_eq!(
        j.due(&c, ms(1_060_000), Z, &mut ev).map(|(t, _)| t.at()),
        Some(at(1_060))
    );
    let mut k = JobTicks::default();
    k.start_after(&c, Some(ms(1_049_000)), ms(1_055_500));
    assert_eq!(
        k.due(&c, ms(1_055_500), Z, &mut ev).map(|(t, _)| t.at()),
        Some(at(1_050))
    );
}

/// A triggered run claimed while a tick waits (its take failed, or it waits for a
/// run elsewhere): the waiting tick cannot start before that run ends, and the
/// run's end wakes the loop, so the tick must not keep waking it meanwhile. (Its
/// past fire time did: the loop turned without pause for the whole run.)
#[test]
fn a_tick_waiting_behind_a_manual_run_does_not_wake_the_loop() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    j.on_unanswered();
    let trigger = crate::control::TriggerId(7);
    let now = ms(1_000_600);
    assert!(j.on_manual(lease(tick, holder.clone()), trigger, now));
    assert_eq!(j.next_wake(Z), Some(at(1010)), "only the next tick");
    // So with a retry time, as after a refusal behind a run elsewhere.
    j.pending.as_mut().unwrap().retry_at = Some(ms(1_000_550));
    assert_eq!(j.next_wake(Z), Some(at(1010)));
    // Once the run ended, the waiting tick is due at once.
    assert!(j.on_finished().is_some());
    assert_eq!(j.next_wake(Z), Some(ms(1_000_550)));
    assert_eq!(j.due(&c, ms(1_000_700), Z, &mut ev), Some((tick, holder)));
}

#[test]
fn a_manual_run_holds_the_job_and_is_refused_while_one_runs() {
    let (mut j, c, mut ev) = started();
    let (tick, holder) = j.due(&c, ms(1_000_500), Z, &mut ev).unwrap();
    let trigger = crate::control::TriggerId(7);
    assert!(j.on_manual(lease(tick, holder.clone()), trigger, ms(1_000_600)));
    assert_eq!(j.running().map(|r| r.trigger), Some(Some(trigger)));
    assert!(!j.on_manual(lease(tick, holder), trigger, ms(1_000_700)));
    // A tick due meanwhile meets it as the overlap policy says (skip).
    j.due(&c, ms(1_010_000), Z, &mut ev);
    assert!(
        ev.iter()
            .any(|e| matches!(e, TickEvent::SkippedOverlap { .. })),
        "{ev:?}"
    );
}
