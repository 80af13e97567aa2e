//! The CLI against a running `Scheduler`, on PostgreSQL and on a SQLite file: a
//! dynamic schedule stored by `schedules put` is picked up by the instance, and
//! `trigger --wait` returns once the instance ran it, its exit code saying how the
//! handler ended; the jobs registered in code are known to `pause` as soon as the
//! instance polls, a typo of one refused with the right name.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use scheduler_cli::EXIT_RUN_FAILED;
use scheduler_core::{BoxError, Idempotent, JobContext, Schedule, Scheduler};
use support::stores::{Db, eventually, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_on_postgres_runs_what_the_cli_asks() {
    runs_what_the_cli_asks(Db::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_on_sqlite_runs_what_the_cli_asks() {
    runs_what_the_cli_asks(Db::sqlite().await).await;
}

/// A job registered in code whose tick does not come during the test.
struct Daily;

#[scheduler_core::async_trait]
impl Idempotent for Daily {
    fn name(&self) -> &str {
        "daily-digest"
    }
    fn schedule(&self) -> Schedule {
        Schedule::every(Duration::from_secs(24 * 3600))
    }
    async fn run(&self, _ctx: JobContext) -> Result<(), BoxError> {
        Ok(())
    }
}

async fn runs_what_the_cli_asks(db: Db) {
    let kind = db.kind;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handler = move |_ctx: JobContext, args: Arc<str>| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let args: serde_json::Value = serde_json::from_str(&args)?;
            match args["fail"].as_str() {
                Some(why) => Err(BoxError::from(why.to_owned())),
                None => Ok(()),
            }
        }
    };
    let scheduler = Scheduler::builder(db.store.clone())
        .node_id("node-a")
        .control_poll(Some(Duration::from_millis(100)))
        .handler("count", handler)
        .job(Daily)
        .build()
        .expect("build");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(scheduler.run_until(async move {
        let _ = stopped.await;
    }));
    eventually("the instance registers its handler", || async {
        db.controls()
            .handlers()
            .await
            .unwrap()
            .contains(&"count".to_owned())
    })
    .await;

    // The job registered in code is known (registered at the first poll with the
    // handler), though it never ran; a typo of it is refused, naming it.
    eventually("the instance registers its job", || async {
        db.controls()
            .jobs()
            .await
            .unwrap()
            .contains(&"daily-digest".to_owned())
    })
    .await;
    let out = db.cli(&["pause", "daily-digets"]).await;
    assert_eq!(out.status.code(), Some(4), "{kind}");
    assert!(
        text(&out.stderr).contains("did you mean \"daily-digest\"?"),
        "{kind}: {}",
        text(&out.stderr)
    );
    let out = db.cli(&["pause", "daily-digest"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let out = db.cli(&["resume", "daily-digest"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));

    // Once a year: nothing runs unless triggered.
    for (name, args) in [
        ("yearly", "{}"),
        ("broken", r#"{"fail": "the disk is full"}"#),
    ] {
        let out = db
            .cli(&[
                "schedules",
                "put",
                name,
                "--handler",
                "count",
                "--cron",
                "0 0 0 1 1 *",
                "--args",
                args,
            ])
            .await;
        assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    }

    let done = json(
        &db.cli(&["trigger", "yearly", "--wait", "--timeout", "60s", "--json"])
            .await,
    );
    assert_eq!(done["state"], "done", "{kind}: {done}");
    assert_eq!(done["outcome"], "succeeded", "{kind}: {done}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{kind}");

    let out = db
        .cli(&["trigger", "broken", "--wait", "--timeout", "60s"])
        .await;
    assert_eq!(
        out.status.code(),
        Some(i32::from(EXIT_RUN_FAILED)),
        "{kind}: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("the disk is full"),
        "{kind}: {}",
        text(&out.stdout)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2, "{kind}");

    let _ = stop.send(());
    running.await.unwrap();
}
