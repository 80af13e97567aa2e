//! A typo does nothing silently: `pause`, `resume` and `trigger` of a job no
//! instance knows are refused (exit 4), naming the job, the closest known name and
//! `--force`; with `--force` the control is stored all the same. Known: the jobs the
//! instances registered, the dynamic schedules, the names in the lease table.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use support::stores::{Db, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_jobs_are_refused_on_postgres() {
    unknown_jobs_are_refused(&Db::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_jobs_are_refused_on_sqlite() {
    unknown_jobs_are_refused(&Db::sqlite().await).await;
}

async fn unknown_jobs_are_refused(db: &Db) {
    let kind = db.kind;
    // `sweep` ran once: its lease is in the table.
    assert_eq!(db.take("sweep", "node-a").await.won.len(), 1, "{kind}");
    for command in ["pause", "resume", "trigger"] {
        let out = db.cli(&[command, "no-such-job"]).await;
        assert_eq!(out.status.code(), Some(4), "{kind} {command}: {out:?}");
        assert_eq!(
            text(&out.stderr),
            "error: no instance knows a job named \"no-such-job\" (known: sweep): check the \
             name, or pass --force to act on it all the same\n",
            "{kind} {command}"
        );
        let out = db.cli(&[command, "swep"]).await;
        assert_eq!(out.status.code(), Some(4), "{kind} {command}");
        assert!(
            text(&out.stderr).starts_with(
                "error: no instance knows a job named \"swep\": did you mean \"sweep\"? "
            ),
            "{kind} {command}: {}",
            text(&out.stderr)
        );
    }
    // Nothing was stored.
    let history = json(&db.cli(&["history", "--json"]).await);
    assert_eq!(history["controls"].as_array().unwrap().len(), 0, "{kind}");

    // Forced: stored, as before; and a forced pause can be undone without force.
    let out = db.cli(&["pause", "no-such-job", "--force"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let out = db.cli(&["trigger", "no-such-job"]).await;
    assert_eq!(
        out.status.code(),
        Some(4),
        "{kind}: a pause does not make it known"
    );
    let out = db.cli(&["resume", "no-such-job"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    // A known name is acted on.
    let out = db.cli(&["pause", "sweep"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));

    // Known too: a job an instance registered (never run yet), a dynamic schedule,
    // a node job's lease (its --node checks the job's name only).
    db.controls()
        .register_jobs("node-a", &["nightly".to_owned(), "sweep".to_owned()])
        .await
        .unwrap();
    db.controls()
        .register_handlers("node-a", &["send_report".to_owned()])
        .await
        .unwrap();
    let out = db
        .cli(&[
            "schedules",
            "put",
            "report-acme",
            "--handler",
            "send_report",
            "--every",
            "1h",
        ])
        .await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    assert_eq!(
        db.take_named("uptime:node-b", "uptime", "node-b")
            .await
            .won
            .len(),
        1,
        "{kind}"
    );
    for args in [
        &["pause", "nightly"][..],
        &["trigger", "report-acme"],
        &["pause", "uptime", "--node", "node-a"],
        &["resume", "uptime", "--node", "node-b"],
    ] {
        let out = db.cli(args).await;
        assert!(
            out.status.success(),
            "{kind} {args:?}: {}",
            text(&out.stderr)
        );
    }
    // A removed schedule is no longer known.
    let out = db.cli(&["schedules", "rm", "report-acme"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let out = db.cli(&["trigger", "report-acme"]).await;
    assert_eq!(out.status.code(), Some(4), "{kind}: {}", text(&out.stderr));
    let out = db.cli(&["pause", "nightlyy"]).await;
    assert!(
        text(&out.stderr).contains("did you mean \"nightly\"?"),
        "{kind}: {}",
        text(&out.stderr)
    );
}
