//! The SQLite run history: `RunHistory::new` creates the table once, a scheduler that
//! records its runs writes one row per run, `Controls::runs` reads them back newest
//! first (and nothing when the store keeps no history), and the retention sweep
//! deletes only the runs older than the retention.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    BoxError, FencingToken, Holder, Idempotent, JobContext, Outcome, Page, RunRecord, RunRecorder,
    Schedule, Scheduler, Scope, Store, Tick,
};
use scheduler_sqlite::history::{MAX_ERROR_LEN, RETENTION_JOB};
use scheduler_sqlite::{HistoryOptions, RunHistory, SqliteOptions, SqliteStore};
use support::TempDir;

fn record(job: &str, started: DateTime<Utc>, outcome: Outcome) -> RunRecord {
    RunRecord {
        job: job.to_owned(),
        tick: Tick::new(started),
        node: "node-a".to_owned(),
        holder: Holder::generate(),
        token: FencingToken::new(7),
        started,
        finished: started + TimeDelta::milliseconds(250),
        outcome,
        error: None,
        lease_lost: false,
        attempt: 1,
    }
}

#[tokio::test]
async fn runs_are_read_back_newest_first_and_paged() {
    let dir = TempDir::new("history-read");
    let store = SqliteStore::open(dir.join("leases.db"), SqliteOptions::default())
        .await
        .expect("open");
    let controls = store.controls().expect("controls");
    assert!(
        controls
            .runs(None, Page::default())
            .await
            .expect("runs without a history")
            .is_empty()
    );

    let history = RunHistory::new(&store, HistoryOptions::default())
        .await
        .expect("history");
    assert_eq!(history.table().to_string(), "scheduler_leases_runs");
    let now = store.now().await.expect("clock");
    let first = record("report", now - TimeDelta::seconds(20), Outcome::Succeeded);
    let mut failed = record("report", now - TimeDelta::seconds(10), Outcome::Failed);
    failed.error = Some(format!("boom\0{}", "é".repeat(MAX_ERROR_LEN)));
    failed.attempt = 2;
    failed.lease_lost = true;
    let other = record("sweep", now, Outcome::Succeeded);
    for run in [&first, &failed, &other] {
        history.record(run).await.expect("record");
    }

    let reports = controls
        .runs(Some("report"), Page::default())
        .await
        .expect("runs");
    assert_eq!(reports.len(), 2, "{reports:?}");
    let (newest, oldest) = (&reports[0], &reports[1]);
    assert!(newest.id > oldest.id);
    assert_eq!(
        (
            newest.job.as_str(),
            newest.tick,
            newest.node.as_str(),
            newest.token,
            newest.started,
            newest.finished,
            newest.outcome.as_str(),
            newest.attempt
        ),
        (
            "report",
            failed.tick.at(),
            "node-a",
            7,
            failed.started,
            failed.finished,
            "failed",
            2
        )
    );
    let error = newest.error.as_deref().expect("the error");
    assert!(error.starts_with("boom\u{fffd}é"), "{error:.20}");
    assert!(error.len() <= MAX_ERROR_LEN && error.ends_with('…'));
    assert_eq!(
        (oldest.outcome.as_str(), oldest.error.as_deref()),
        ("succeeded", None)
    );

    let all = controls.runs(None, Page::default()).await.expect("runs");
    assert_eq!(
        all.iter().map(|r| r.job.as_str()).collect::<Vec<_>>(),
        ["sweep", "report", "report"]
    );
    let page = controls
        .runs(
            None,
            Page {
                before: Some(all[0].id),
                limit: 1,
            },
        )
        .await
        .expect("page");
    assert_eq!(page, all[1..2].to_vec());
}

#[tokio::test]
async fn the_retention_sweep_deletes_only_old_runs() {
    let dir = TempDir::new("history-sweep");
    let store = SqliteStore::open(dir.join("leases.db"), SqliteOptions::default())
        .await
        .expect("open");
    let history = RunHistory::new(
        &store,
        HistoryOptions::default().retention(Duration::from_secs(3600)),
    )
    .await
    .expect("history");
    let now = store.now().await.expect("clock");
    for age in [7200, 3700, 3500, 10] {
        let run = record("aged", now - TimeDelta::seconds(age), Outcome::Succeeded);
        history.record(&run).await.expect("record");
    }
    assert_eq!(history.sweep().await.expect("sweep"), 2);
    assert_eq!(history.sweep().await.expect("sweep again"), 0);
    let left = store
        .controls()
        .expect("controls")
        .runs(Some("aged"), Page::default())
        .await
        .expect("runs");
    assert_eq!(left.len(), 2);
    assert!(
        left.iter()
            .all(|r| r.started > now - TimeDelta::seconds(3600))
    );

    let job = history.retention_job();
    assert_eq!((job.name(), job.scope()), (RETENTION_JOB, Scope::Cluster));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_opening_one_file_create_the_history_once() {
    let dir = TempDir::new("history-race");
    let path = dir.join("leases.db");
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let path = path.clone();
        opening.spawn(async move {
            let store = SqliteStore::open(&path, SqliteOptions::default())
                .await
                .expect("open");
            RunHistory::new(&store, HistoryOptions::default())
                .await
                .map(|_| ())
        });
    }
    for created in opening.join_all().await {
        created.expect("every instance gets the history");
    }
}

/// A job every second that succeeds.
struct Tick1s;

#[scheduler_core::async_trait]
impl Idempotent for Tick1s {
    fn name(&self) -> &str {
        "every-second"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(1))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_records_each_run() {
    let dir = TempDir::new("history-runtime");
    let store = SqliteStore::open(dir.join("leases.db"), SqliteOptions::default())
        .await
        .expect("open");
    let history = Arc::new(
        RunHistory::new(&store, HistoryOptions::default())
            .await
            .expect("history"),
    );
    let scheduler = Scheduler::builder(store.clone())
        .node_id("node-a")
        .lease_ttl(Duration::from_secs(4))
        .record_runs(history.clone())
        .job(Tick1s)
        .build()
        .expect("build");
    let stats = scheduler.stats();
    let counts = stats.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    scheduler
        .run_until(async move {
            while counts.count("every-second", Outcome::Succeeded) < 2 {
                assert!(tokio::time::Instant::now() < deadline, "never ran twice");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    let ran = stats.count("every-second", Outcome::Succeeded);
    let controls = store.controls().expect("controls");
    // Runs are recorded off the loop: the last may land just after it stopped.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let runs = loop {
        let runs = controls
            .runs(Some("every-second"), Page::default())
            .await
            .expect("runs");
        if runs.len() as u64 >= ran {
            break runs;
        }
        assert!(tokio::time::Instant::now() < deadline, "{runs:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(runs.len() as u64, ran, "one row per run: {runs:?}");
    assert!(
        runs.iter()
            .all(|r| r.node == "node-a" && r.outcome == Outcome::Succeeded)
    );
    assert!(
        runs.windows(2)
            .all(|w| w[0].tick > w[1].tick && w[0].token > w[1].token)
    );
}

/// Many runs ending together (one tick of 5,000 jobs, each recorded on a task of its
/// own, as the runtime does) are all recorded, and a lease statement sent meanwhile
/// goes through: the runs are written a few hundred per transaction, so the file's
/// write lock is not queued for once per run until the busy timeout drops some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_ending_together_are_all_recorded() {
    const RUNS: usize = 5_000;
    let dir = TempDir::new("history-burst");
    let options = SqliteOptions::default().busy_timeout(Duration::from_secs(1));
    let store = SqliteStore::open(dir.join("leases.db"), options)
        .await
        .expect("open");
    let history = Arc::new(
        RunHistory::new(&store, HistoryOptions::default())
            .await
            .expect("history"),
    );
    let now = store.now().await.expect("clock");
    let recorders: Vec<_> = (0..RUNS)
        .map(|i| {
            let history = history.clone();
            let run = record(&format!("job-{i}"), now, Outcome::Succeeded);
            tokio::spawn(async move { history.record(&run).await.map_err(|e| e.to_string()) })
        })
        .collect();
    let take = store
        .take(
            &[scheduler_core::TakeRequest::new(
                scheduler_core::LeaseName::new("next").expect("name"),
                Tick::new(now),
            )],
            scheduler_core::Ttl::new(Duration::from_secs(30)).expect("ttl"),
        )
        .await;
    let mut failed = Vec::new();
    for r in recorders {
        if let Err(e) = r.await.expect("join") {
            failed.push(e);
        }
    }
    assert!(take.is_ok(), "{take:?}");
    assert!(
        failed.is_empty(),
        "{} of {RUNS} runs not recorded, first: {:?}",
        failed.len(),
        failed.first()
    );
    let controls = store.controls().expect("controls");
    let mut read = 0;
    let mut before = None;
    loop {
        let page = controls
            .runs(
                None,
                Page {
                    before,
                    limit: 1_000,
                },
            )
            .await
            .expect("runs");
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        read += page.len();
    }
    assert_eq!(read, RUNS);
}
