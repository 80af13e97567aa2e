//! The edges of issue 32, one named scenario (or test) each: for an edge fixed, the
//! promise, asserted (it failed before the fix); for a documented limit, today's
//! behaviour, asserted, with the README's sentence in a comment.

use std::sync::Arc;
use std::time::Duration;

use scheduler_core::{
    BoxError, CatchUp, ControlRequest, Controls, Error, Idempotent, JobContext, MemoryStore,
    Overlap, Policy, Schedule, Scheduler, TriggerState,
};
use scheduler_simulator::{Act, Job, Options, Scenario, scenario};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

fn options() -> Options {
    Options {
        chaos: secs(30),
        quiet: secs(15),
        ..Options::default()
    }
}

fn two(ttl: u64, jobs: Vec<Job>, script: Vec<(Duration, Act)>) -> Scenario {
    Scenario {
        nodes: vec!["n0".into(), "n1".into()],
        ttl: secs(ttl),
        jobs,
        dynamic: vec![],
        script,
    }
}

fn all(max: u32) -> Policy {
    Policy::default().catch_up(CatchUp::All { max })
}

/// Edge 1: a resume with catch-up, paused again before any instance polled.
/// Documented limit: "A resume with catch-up that a pause undoes before any
/// instance's next control poll catches nothing up (start-up's missed ticks left to
/// it included): the catch-up is decided when a poll reads the resume, and a later
/// resume catches up only what its own pause covered." The instances restart while
/// the job is paused (start-up leaves its missed ticks to the resume), the resume
/// at 12.2 s is undone at 12.3 s (the polls fall at 12.0 s and 12.5 s), and the
/// resume at 16 s catches up the three ticks of its own pause only.
#[test]
fn edge_01_a_resume_undone_before_any_poll_catches_nothing_up() {
    let report = scenario(
        11,
        two(
            3,
            vec![Job::new("sweep", secs(1), all(3)).fenced()],
            vec![
                (secs(3), Act::Pause(0, None)),
                (secs(4), Act::Kill(0)),
                (secs(4), Act::Kill(1)),
                (secs(8), Act::Restart(0)),
                (secs(8), Act::Restart(1)),
                (ms(12_200), Act::Resume(0, true)),
                (ms(12_300), Act::Pause(0, None)),
                (secs(16), Act::Resume(0, true)),
            ],
        ),
        options(),
    );
    report.assert_ok();
    let ran: Vec<u64> = (4..=16).filter(|&t| report.ran_tick("sweep", t)).collect();
    assert_eq!(ran, vec![14, 15, 16], "{report:#?}");
}

/// Edge 2 (PostgreSQL only, not simulable on the memory store, whose controls and
/// takes are atomic): "On PostgreSQL a take evaluated while a pause or resume
/// statement waits for its lock can fall between the control's `since` and
/// `resumed_at` (statement time, not commit time)." Here: the memory store's take
/// right after a resume is granted, one right after a pause refused.
#[tokio::test(start_paused = true)]
async fn edge_02_the_memory_stores_controls_are_atomic_with_takes() {
    let store = Arc::new(MemoryStore::new());
    let req = ControlRequest::new("sweep", "test");
    store.pause(&req).await.unwrap();
    let scheduler = Scheduler::builder(store.clone())
        .node_id("n0")
        .control_poll(Some(ms(100)))
        .job(Sleeper("sweep", 0))
        .build()
        .unwrap();
    let runs = scheduler.stats();
    let _ = runs;
    let paused = store.leases().await.unwrap();
    assert!(paused.is_empty(), "{paused:?}");
    store.resume(&req, false).await.unwrap();
    let run = tokio::spawn(scheduler.run_until(tokio::time::sleep(secs(3))));
    run.await.unwrap();
    assert!(!store.leases().await.unwrap().is_empty());
}

/// Edge 3: a resume's catch-up cut by a graceful shutdown. Documented limit: "A
/// resume's catch-up cut short by a shutdown is not redone when the instances start
/// again: the ticks it had not completed stay missed (a backfill of the range runs
/// them)." Every instance drains 300 ms after the resume; the ticks caught up
/// (the three before it, each working up to 3 s) do not all run once restarted.
#[test]
fn edge_03_a_catch_up_cut_by_a_shutdown_is_not_redone() {
    let report = scenario(
        3,
        two(
            3,
            vec![Job::new("sweep", secs(1), all(3)).work(secs(3)).fenced()],
            vec![
                (secs(3), Act::Pause(0, None)),
                (secs(10), Act::Resume(0, true)),
                (ms(10_300), Act::Drain(0)),
                (ms(10_300), Act::Drain(1)),
                (secs(13), Act::Restart(0)),
                (secs(13), Act::Restart(1)),
            ],
        ),
        options(),
    );
    report.assert_ok();
    // The catch-up ran 8 s and 9 s; 9 s completed, 8 s was cut and 10 s never
    // began: neither runs after the restart.
    let done: Vec<u64> = (8..=10)
        .filter(|&t| report.commits_of("sweep", t) > 0)
        .collect();
    assert_eq!(done, vec![9], "{report:#?}");
}

/// Edge 4: a trigger's claimant dies while its run works. The job's tick at 20 s
/// completed before the trigger (at 23 s) took the job's lease; every instance
/// dies at 24.6 s and starts again at 30 s, under `CatchUp::Latest`: tick 20 s must
/// not run again (the trigger's row keeps the completion it took the lease from).
/// Not reproduced: the stores already keep it (`keeps_completion`).
#[test]
fn edge_04_a_dead_trigger_claimant_leaves_no_completed_tick_to_run_again() {
    let latest = Policy::default().catch_up(CatchUp::Latest);
    // Seed 2: the claimant dies 1.6 s into the trigger's run, before it commits.
    for seed in 1..=6 {
        let report = scenario(
            seed,
            two(
                2,
                vec![Job::new("report", secs(20), latest).work(secs(3)).fenced()],
                vec![
                    (secs(23), Act::Trigger(0)),
                    (ms(24_600), Act::Kill(0)),
                    (ms(24_600), Act::Kill(1)),
                    (secs(30), Act::Restart(0)),
                    (secs(30), Act::Restart(1)),
                ],
            ),
            Options {
                chaos: secs(40),
                quiet: secs(10),
                ..Options::default()
            },
        );
        report.assert_ok();
        assert_eq!(report.commits_of("report", 20), 1, "seed {seed}");
        let (job, at) = &report.triggers[0];
        assert!(report.ran.contains(&(job.clone(), *at)), "seed {seed}");
    }
}

/// Edge 5: under `CancelRunning`, a scheduled tick older than a trigger does not
/// cancel the trigger's run. The tick at 0 s works long; the instances ask for the
/// tick at 5 s, find it held, ask the old run to stop; the trigger, asked for just
/// after 5 s, claims the lease freed meanwhile; the tick at 5 s, older than the
/// trigger's instant, must not stop it (the stores' `request_cancel` compared the
/// newer tick with the row's scheduled tick and did).
#[test]
fn edge_05_a_scheduled_tick_older_than_a_trigger_does_not_cancel_it() {
    let cancel = Policy::default().overlap(Overlap::CancelRunning);
    let mut cancelled = Vec::new();
    for seed in 1..=12 {
        for offset in [4_700, 4_800, 4_900, 5_000] {
            let report = scenario(
                seed,
                two(
                    4,
                    vec![Job::new("sync", secs(5), cancel).work(secs(9))],
                    vec![(ms(offset), Act::Trigger(0))],
                ),
                options(),
            );
            if !report.violations.is_empty() {
                cancelled.push((seed, offset, report.violations[0].clone()));
            }
        }
    }
    assert!(cancelled.is_empty(), "{cancelled:#?}");
}

/// Edge 6: a cancel request left on a lease row (`cancel_tick`) outlives a crash;
/// a same-tick retake after it must not be cancelled at its first renewal. A
/// `CancelRunning` job whose runs outlast the period, its holder killed while a newer
/// tick asked it to stop: every tick after the crash still commits.
#[test]
fn edge_06_a_stale_cancel_request_does_not_cancel_a_later_take() {
    let cancel = Policy::default().overlap(Overlap::CancelRunning);
    let report = scenario(
        6,
        two(
            3,
            vec![Job::new("sync", secs(2), cancel).work(secs(5))],
            vec![(ms(6_500), Act::Kill(0)), (secs(12), Act::Restart(0))],
        ),
        options(),
    );
    report.assert_ok();
}

/// Edge 7: a job whose lease name leaves no room for a catch-up's suffix (`\@` and
/// up to 19 digits, within the 200-byte name limit) under `CatchUp::All` could
/// never be caught up or backfilled: `build()` refuses it.
#[test]
fn edge_07_a_lease_name_too_long_to_catch_up_is_refused_at_build() {
    let name: &'static str = Box::leak("j".repeat(190).into_boxed_str());
    let built = Scheduler::builder(Arc::new(MemoryStore::new()))
        .node_id("n0")
        .job_with_policy(Sleeper(name, 0), all(3))
        .build();
    assert!(
        matches!(built, Err(Error::InvalidName { .. })),
        "{:?}",
        built.err()
    );
    // Without catch-up, the same name is fine.
    let built = Scheduler::builder(Arc::new(MemoryStore::new()))
        .node_id("n0")
        .job(Sleeper(name, 0))
        .build();
    assert!(built.is_ok(), "{:?}", built.err());
}

// Edge 8 (`Slot::next_after` gives up early) is a property of a schedule alone, not
// of a cluster: scheduler-core's `schedule/tests.rs` checks it against a plain walk
// of the calendar (`a_slot_finds_its_next_tick_wherever_the_schedule_has_one`), and
// the README states the bound.

/// Edge 9: a trigger of a job no instance runs. Documented limit: "A trigger of a
/// job no instance runs stays pending until an instance running that job starts;
/// the store cannot tell a job nobody runs from one whose instances are down."
#[tokio::test(start_paused = true)]
async fn edge_09_a_trigger_of_a_job_nobody_runs_stays_pending() {
    let store = Arc::new(MemoryStore::new());
    let scheduler = Scheduler::builder(store.clone())
        .node_id("n0")
        .control_poll(Some(ms(200)))
        .job(Sleeper("sweep", 0))
        .build()
        .unwrap();
    let trigger = store
        .trigger(&ControlRequest::new("nobody-runs-me", "test"))
        .await
        .unwrap();
    scheduler.run_until(tokio::time::sleep(secs(60))).await;
    let now = store.trigger_status(trigger.id).await.unwrap().unwrap();
    assert!(matches!(now.state, TriggerState::Pending), "{now:?}");
}

/// Edge 10, fixed: a handler registration used to outlive the instances that made
/// it (a row naming a handler no running instance had was accepted, and waited for
/// one: this test asserted that until instances kept a heartbeat). Now a
/// registration counts while its instance is live: once the only instance that
/// registered `h` has stopped (and its row expired: an hour later), a row naming `h`
/// is refused, and accepted again once an instance with `h` runs.
#[tokio::test(start_paused = true)]
async fn edge_10_a_handler_registration_ends_with_its_instance() {
    let store = Arc::new(MemoryStore::new());
    let make = || {
        Scheduler::builder(store.clone())
            .node_id("n0")
            .control_poll(Some(ms(200)))
            .handler("h", |_ctx: JobContext, _args: Arc<str>| async {
                Ok::<(), BoxError>(())
            })
            .build()
            .unwrap()
    };
    make().run_until(tokio::time::sleep(secs(2))).await;
    tokio::time::sleep(secs(3_600)).await;
    let row = scheduler_core::ScheduleRow::new("late", "h", "every 10s");
    let refused = store.put_schedule(&row, "test", "edge 10").await;
    assert!(
        matches!(refused, Err(Error::UnknownHandler { .. })),
        "{refused:?}"
    );
    let s = store.clone();
    make()
        .run_until(async move {
            tokio::time::sleep(secs(2)).await;
            assert!(s.put_schedule(&row, "test", "edge 10").await.is_ok());
        })
        .await;
}

/// Edge 11: a dynamic schedule changed and removed over and over runs as its row
/// says, every time (documented limit: an instance that loads every row at start-up
/// keeps the entries it retires until it restarts; one loading rows as they come due
/// reuses them once idle).
#[test]
fn edge_11_a_dynamic_schedule_changed_and_removed_runs_as_its_row_says() {
    let mut script = Vec::new();
    for k in 0..6u64 {
        let at = 2 + k * 4;
        let policy = if k % 2 == 0 {
            ""
        } else {
            "overlap = \"concurrent\", max_concurrent = 2"
        };
        script.push((secs(at), Act::Put(0, 1, policy)));
    }
    script.push((secs(26), Act::Remove(0)));
    let report = scenario(
        12,
        Scenario {
            dynamic: vec![Job::new("dyn", secs(1), Policy::default())],
            ..two(
                3,
                vec![Job::new("sweep", secs(1), Policy::default())],
                script,
            )
        },
        options(),
    );
    report.assert_ok();
    assert!(report.ran_tick("dyn", 5) && report.ran_tick("dyn", 25));
    assert!(!report.ran_tick("dyn", 35), "removed, it ran on");
}

/// Backfills beside a live schedule, on both instances at once: every tick of the
/// range once under its own lease, never twice (the model's check).
#[test]
fn backfills_on_two_instances_share_their_ticks() {
    let report = scenario(
        13,
        two(
            3,
            vec![Job::new("sweep", secs(1), Policy::default()).fenced()],
            vec![
                (secs(12), Act::Backfill(0, 0, secs(1), secs(8))),
                (secs(12), Act::Backfill(1, 0, secs(1), secs(8))),
                (ms(12_500), Act::Kill(1)),
                (secs(16), Act::Restart(1)),
            ],
        ),
        options(),
    );
    report.assert_ok();
    for t in 4..=10 {
        assert!(report.commits_of("sweep", t) >= 1, "tick {t}");
    }
}

/// Edge 12: `run_until` hears its shutdown while every store call is slow (each
/// take waits 20 s): it returns within its shutdown grace, not after a turn.
#[tokio::test(start_paused = true)]
async fn edge_12_run_until_hears_its_shutdown_during_a_slow_turn() {
    let store = Arc::new(MemoryStore::new());
    store.set_take_delay(secs(20));
    let scheduler = Scheduler::builder(store.clone())
        .node_id("n0")
        .shutdown_grace(secs(1))
        .job(Sleeper("sweep", 0))
        .build()
        .unwrap();
    let began = tokio::time::Instant::now();
    scheduler.run_until(tokio::time::sleep(secs(2))).await;
    assert!(began.elapsed() <= secs(5), "{:?}", began.elapsed());
}

/// A job that sleeps `.1` ms.
struct Sleeper(&'static str, u64);

#[scheduler_core::async_trait]
impl Idempotent for Sleeper {
    fn name(&self) -> &str {
        self.0
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(secs(1))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        tokio::time::sleep(ms(self.1)).await;
        Ok(())
    }
}
