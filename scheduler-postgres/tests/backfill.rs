//! Backfill against a real server: three instances (each its own pool) run the same
//! 100-tick backfill at once, one of them stopped midway (its future dropped, runs
//! in flight and all); every tick runs exactly once, the ticks the stopped instance
//! was running are taken over once their leases expire, and a backfill started
//! afterwards finds every tick done.
//!
//! The machine may be loaded: waits are for conditions, bounded by [`LIMIT`].
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use scheduler_core::{
    BackfillOptions, BackfillReport, Backfiller, BoxError, Idempotent, JobContext, Schedule,
    Scheduler, Store,
};
use scheduler_postgres::diagnostics::{self, LeaseState};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use test_postgres::TestDb;
use tokio::sync::watch;

/// How long a test waits for something that takes seconds on an idle machine.
const LIMIT: Duration = Duration::from_secs(120);

const TICKS: usize = 100;

/// What the job saw, on every instance.
#[derive(Debug, Default, Clone)]
struct Tally {
    /// (instance, tick) of every run begun.
    started: Vec<(String, DateTime<Utc>)>,
    /// (instance, tick) of every run that did its work to the end.
    done: Vec<(String, DateTime<Utc>)>,
    /// Runs of instance `c` going on now, and how many of them hang.
    c_running: usize,
    c_hanging: usize,
}

/// A job every second that works a little and records its runs; on instance `c`,
/// once `c` has done three ticks, every run hangs (until it is dropped): `c` plays
/// an instance that stops midway with runs in flight that never complete.
#[derive(Clone)]
struct Filler {
    instance: &'static str,
    tally: Arc<Mutex<Tally>>,
    seen: watch::Sender<Tally>,
}

/// Counts a run of `c` out however it ends (a dropped run too).
struct Leaving(Filler, bool);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.update(|t| {
            t.c_running -= 1;
            if self.1 {
                t.c_hanging -= 1;
            }
        });
    }
}

impl Filler {
    fn update(&self, f: impl FnOnce(&mut Tally)) {
        let mut tally = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut tally);
        self.seen.send_replace(tally.clone());
    }
}

#[scheduler_core::async_trait]
impl Idempotent for Filler {
    fn name(&self) -> &str {
        "filler"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(1))
    }
    async fn run(&self, ctx: JobContext) -> Result<(), BoxError> {
        let (me, tick) = (self.instance.to_owned(), ctx.tick().at());
        let mut hangs = false;
        self.update(|t| {
            t.started.push((me.clone(), tick));
            if me == "c" {
                let c_done = t.done.iter().filter(|(i, _)| *i == "c").count();
                hangs = c_done >= 3;
                t.c_running += 1;
                t.c_hanging += usize::from(hangs);
            }
        });
        let _leaving = (me == "c").then(|| Leaving(self.clone(), hangs));
        if hangs {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.update(|t| t.done.push((me.clone(), tick)));
        Ok(())
    }
}

async fn instance(db: &TestDb, name: &'static str, job: &Filler) -> (PostgresStore, Backfiller) {
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    let mut job = job.clone();
    job.instance = name;
    let scheduler = Scheduler::builder(store.clone())
        .node_id(name)
        .lease_ttl(Duration::from_secs(6))
        .job(job)
        .build()
        .expect("build");
    (store, scheduler.backfiller())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_share_a_backfill_one_stopped_midway_each_tick_once() {
    let db = TestDb::new().await;
    let (seen, mut watch) = watch::channel(Tally::default());
    let job = Filler {
        instance: "",
        tally: Arc::default(),
        seen,
    };
    let (store, a) = instance(&db, "a", &job).await;
    let (_, b) = instance(&db, "b", &job).await;
    let (_, c) = instance(&db, "c", &job).await;

    // 100 whole seconds ending ten minutes ago on the database's clock.
    let now = store.now().await.expect("now");
    let to = now.duration_trunc(TimeDelta::seconds(1)).unwrap() - TimeDelta::minutes(10);
    let from = to - TimeDelta::seconds(TICKS as i64 - 1);
    let options = BackfillOptions::default().concurrency(4);
    let spawn = |backfiller: Backfiller| {
        tokio::spawn(async move { backfiller.backfill("filler", from, to, options).await })
    };
    let (ta, tb) = (spawn(a), spawn(b));

    // `c` runs until every run it has is one that hangs, and is then dropped: those
    // ticks are held by nobody alive until their leases expire.
    let mut c_run = Box::pin(c.backfill("filler", from, to, options));
    let stopped = tokio::time::timeout(LIMIT, async {
        tokio::select! {
            report = &mut c_run => {
                panic!("c finished before it was stopped: {report:?}")
            }
            seen = watch.wait_for(|t| t.c_hanging > 0 && t.c_hanging == t.c_running) => {
                seen.expect("watch").clone()
            }
        }
    })
    .await
    .expect("c never hung");
    // Only once `c` has released the ticks it completed: a run that ended but whose
    // release never reached the store is, like a crash's, run again.
    let c_done: Vec<String> = stopped
        .done
        .iter()
        .filter(|(i, _)| i == "c")
        .map(|(_, t)| format!("filler\\@{}", t.timestamp_micros()))
        .collect();
    let released = async {
        loop {
            let status = diagnostics::lease_status(&store, store.table())
                .await
                .expect("status")
                .expect("table");
            let released = |name: &String| {
                status
                    .leases
                    .iter()
                    .any(|l| l.lease == *name && l.state == LeaseState::Released)
            };
            if c_done.iter().all(released) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(LIMIT, async {
        tokio::select! {
            report = &mut c_run => panic!("c finished before it was stopped: {report:?}"),
            () = released => {}
        }
    })
    .await
    .expect("c's completed ticks released");
    drop(c_run);
    let hung: Vec<DateTime<Utc>> = stopped
        .started
        .iter()
        .filter(|(i, t)| i == "c" && !stopped.done.iter().any(|(_, d)| d == t))
        .map(|(_, t)| *t)
        .collect();
    assert!(!hung.is_empty());

    let ra = tokio::time::timeout(LIMIT, ta).await.expect("a in time");
    let rb = tokio::time::timeout(LIMIT, tb).await.expect("b in time");
    let (ra, rb) = (ra.expect("join").expect("a"), rb.expect("join").expect("b"));
    let tally = job.tally.lock().unwrap().clone();
    assert_eq!(tally.c_running, 0, "c's runs were not dropped");

    // Each tick of the range done exactly once, whoever ran it.
    let mut done: Vec<DateTime<Utc>> = tally.done.iter().map(|(_, t)| *t).collect();
    done.sort_unstable();
    let expected: Vec<DateTime<Utc>> = (0..TICKS as i64)
        .map(|k| from + TimeDelta::seconds(k))
        .collect();
    assert_eq!(done, expected, "a tick missing or run twice");
    // The ticks `c` hung on were run again, by `a` or `b`, to the end.
    for t in &hung {
        assert!(
            tally.done.iter().any(|(i, d)| d == t && i != "c"),
            "{t} was never taken over"
        );
    }
    let by = |who: &str| tally.done.iter().filter(|(i, _)| i == who).count();
    assert_eq!(ra.ran, by("a"));
    assert_eq!(rb.ran, by("b"));
    assert_eq!(by("a") + by("b") + by("c"), TICKS);
    assert!(by("c") >= 3);
    for r in [ra, rb] {
        assert_eq!(
            (r.ticks, r.ran + r.already_done, r.failed),
            (TICKS, TICKS, 0)
        );
    }

    // A row per tick, each released as completed; the job's own lease was never
    // taken.
    let status = diagnostics::lease_status(&store, store.table())
        .await
        .expect("status")
        .expect("table");
    assert!(status.leases.iter().all(|l| l.lease != "filler"));
    let rows: Vec<_> = status
        .leases
        .iter()
        .filter(|l| l.lease.starts_with("filler\\@"))
        .collect();
    assert_eq!(rows.len(), TICKS);
    assert!(rows.iter().all(|l| l.state == LeaseState::Released));

    // Started again, on a fourth instance: nothing left to do.
    let (_, d) = instance(&db, "d", &job).await;
    let again = d
        .backfill("filler", from, to, options)
        .await
        .expect("backfill");
    let mut expected = BackfillReport::default();
    (expected.ticks, expected.already_done) = (TICKS, TICKS);
    assert_eq!(again, expected);
    assert_eq!(job.tally.lock().unwrap().done.len(), TICKS);
}
