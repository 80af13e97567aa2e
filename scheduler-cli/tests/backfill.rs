//! `backfill` from an app's own command line (the library's `BackfillArgs` and
//! `backfill`), and the tool's own `backfill` saying where it belongs.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Parser;
use scheduler_cli::BackfillArgs;
use scheduler_core::{BoxError, Idempotent, JobContext, MemoryStore, Schedule, Scheduler};

/// An app's command line with the backfill mounted.
#[derive(Debug, Parser)]
enum App {
    /// Backfill a job.
    Backfill(BackfillArgs),
}

struct Counter(Arc<AtomicUsize>);

#[scheduler_core::async_trait]
impl Idempotent for Counter {
    fn name(&self) -> &str {
        "sweep"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(60))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn parse(args: &[&str]) -> BackfillArgs {
    let App::Backfill(args) = App::try_parse_from(["app", "backfill"].iter().chain(args))
        .unwrap_or_else(|e| panic!("{e}"));
    args
}

#[tokio::test]
async fn an_app_mounts_the_backfill_and_a_rerun_finds_it_done() {
    let runs = Arc::new(AtomicUsize::new(0));
    let scheduler = Scheduler::builder(MemoryStore::new())
        .node_id("node-a")
        .job(Counter(runs.clone()))
        .build()
        .expect("build");
    let backfiller = scheduler.backfiller();
    let args = parse(&[
        "sweep",
        "--from",
        "2026-11-01T00:00:00Z",
        "--to",
        "2026-11-01T00:09:00Z",
        "--concurrency",
        "3",
    ]);
    let done = scheduler_cli::backfill(&backfiller, &args)
        .await
        .expect("backfill");
    assert_eq!(
        (done.ticks, done.ran, done.already_done, done.failed),
        (10, 10, 0, 0)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 10);
    assert_eq!(
        done.human(),
        "backfilled sweep from 2026-11-01T00:00:00+00:00 to 2026-11-01T00:09:00+00:00: \
         10 ticks, 10 ran, 0 already done, 0 failed\n"
    );
    let again = scheduler_cli::backfill(&backfiller, &args)
        .await
        .expect("backfill");
    assert_eq!((again.ran, again.already_done), (0, 10));
    let json: serde_json::Value = serde_json::from_str(&again.json().unwrap()).unwrap();
    assert_eq!(json["already_done"], 10);
    assert_eq!(
        json["from"]
            .as_str()
            .map(|s| s.parse::<DateTime<Utc>>().unwrap()),
        Some("2026-11-01T00:00:00Z".parse().unwrap())
    );

    // Refused before anything runs: an unknown job.
    let err = scheduler_cli::backfill(
        &backfiller,
        &parse(&[
            "nope",
            "--from",
            "2026-11-01T00:00:00Z",
            "--to",
            "2026-11-01T00:01:00Z",
        ]),
    )
    .await
    .expect_err("unknown job");
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn bad_instants_and_concurrency_are_refused_while_parsing() {
    for args in [
        [
            "sweep",
            "--from",
            "yesterday",
            "--to",
            "2026-11-01T00:00:00Z",
        ]
        .as_slice(),
        [
            "sweep",
            "--from",
            "2026-11-01T00:00:00Z",
            "--to",
            "2026-11-01T00:00:00Z",
            "--concurrency",
            "0",
        ]
        .as_slice(),
    ] {
        let err = App::try_parse_from(["app", "backfill"].iter().chain(args)).expect_err("refused");
        assert_eq!(err.exit_code(), 2, "{err}");
    }
}

#[test]
fn the_tool_says_backfill_belongs_in_the_app() {
    let out = Command::new(env!("CARGO_BIN_EXE_scheduler-cli"))
        .args([
            "backfill",
            "sweep",
            "--from",
            "2026-11-01T00:00:00Z",
            "--to",
            "2026-11-01T00:09:00Z",
        ])
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("backfill runs job \"sweep\"'s own code, which lives in your app")
            && stderr.contains("scheduler_cli::BackfillArgs"),
        "{stderr}"
    );
}
