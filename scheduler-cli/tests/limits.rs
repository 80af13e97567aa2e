//! The limits of controls through the built binary, on PostgreSQL and on a SQLite
//! file: a `--why` or `--by` over 1 KiB or an empty `--by` (exit 2, nothing
//! recorded), an `--every` period under the minimum unless `--min-period` lowers it
//! (exit 2), and a trigger of a paused job refused without `--while-paused` (exit
//! 5), recorded as `trigger_while_paused` with it.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use scheduler_cli::{EXIT_REFUSED, EXIT_USAGE};
use scheduler_core::Page;
use support::stores::{Db, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_on_postgres() {
    let db = Db::postgres().await;
    texts_over_the_limit_are_refused(&db).await;
    every_periods_keep_the_minimum(&db).await;
    a_paused_trigger_is_said_as_such(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_on_sqlite() {
    let db = Db::sqlite().await;
    texts_over_the_limit_are_refused(&db).await;
    every_periods_keep_the_minimum(&db).await;
    a_paused_trigger_is_said_as_such(&db).await;
}

/// Exit 2 and `says` on stderr.
fn usage(out: &std::process::Output, says: &str, what: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(EXIT_USAGE.into()),
        "{what}: {stderr}"
    );
    assert!(
        stderr.starts_with("error: ") && stderr.contains(says),
        "{what}: {stderr}"
    );
}

async fn texts_over_the_limit_are_refused(db: &Db) {
    let kind = db.kind;
    db.runs("node-a", &["sweep"]).await;
    db.controls()
        .register_handlers("node-a", &["send_report".to_owned()])
        .await
        .unwrap();
    // A command line's argument holds at most 128 KiB on Linux: 100,000 bytes.
    let long = "w".repeat(100_000);
    let says = "the reason (`why`) is 100,000 bytes; at most 1,024 are kept";
    let lines: [&[&str]; 5] = [
        &["pause", "sweep", "--why", &long],
        &["resume", "sweep", "--why", &long],
        &["trigger", "sweep", "--why", &long],
        &[
            "schedules",
            "put",
            "report",
            "--handler",
            "send_report",
            "--every",
            "1h",
            "--why",
            &long,
        ],
        &["schedules", "rm", "report", "--why", &long],
    ];
    for line in lines {
        let out = db.cli(line).await;
        usage(&out, says, &format!("{kind}: {}", line[0]));
    }
    let long_by = "b".repeat(1025);
    let out = db.cli(&["pause", "sweep", "--by", &long_by]).await;
    usage(
        &out,
        "the actor (`by`) is 1,025 bytes; at most 1,024 are kept",
        kind,
    );
    let out = db.cli(&["trigger", "sweep", "--by", ""]).await;
    usage(&out, "the actor (who asks, `by`) is empty", kind);
    let history = db
        .controls()
        .control_history(None, Page::default())
        .await
        .unwrap();
    assert!(history.is_empty(), "{kind}: recorded: {history:?}");
    // At the limit: kept.
    let at_most = "x".repeat(1024);
    let out = db.cli(&["pause", "sweep", "--why", &at_most]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let out = db.cli(&["resume", "sweep"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
}

async fn every_periods_keep_the_minimum(db: &Db) {
    let kind = db.kind;
    db.controls()
        .register_handlers("node-a", &["send_report".to_owned()])
        .await
        .unwrap();
    let put = |every: &'static str, extra: &'static [&'static str]| {
        let mut line = vec!["schedules", "put", "often", "--handler", "send_report"];
        line.extend_from_slice(&["--every", every]);
        line.extend_from_slice(extra);
        line
    };
    let out = db.cli(&put("1ms", &[])).await;
    usage(&out, "at least every 1s", kind);
    let out = db.cli(&put("50ms", &["--min-period", "100ms"])).await;
    usage(&out, "at least every 100ms", kind);
    assert!(
        db.controls().schedule("often").await.unwrap().is_none(),
        "{kind}"
    );
    let out = db.cli(&put("100ms", &["--min-period", "100ms"])).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let row = db.controls().schedule("often").await.unwrap().unwrap();
    assert_eq!(row.schedule, "every 100ms", "{kind}");
    // A zone with --every: clap refuses the pair.
    let out = db.cli(&put("1h", &["--zone", "Europe/Berlin"])).await;
    assert_eq!(out.status.code(), Some(EXIT_USAGE.into()), "{kind}");
    let out = db.cli(&["schedules", "rm", "often"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
}

async fn a_paused_trigger_is_said_as_such(db: &Db) {
    let kind = db.kind;
    db.runs("node-a", &["reindex"]).await;
    let out = db
        .cli(&["pause", "reindex", "--by", "alice", "--why", "maintenance"])
        .await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let out = db.cli(&["trigger", "reindex"]).await;
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(EXIT_REFUSED.into()),
        "{kind}: {stderr}"
    );
    assert!(
        stderr.starts_with(
            "error: \"reindex\" is paused (by alice: maintenance); triggering it runs it \
             while paused: say so explicitly"
        ),
        "{kind}: {stderr}"
    );
    assert!(
        db.controls().open_triggers().await.unwrap().is_empty(),
        "{kind}"
    );
    let out = db
        .cli(&["trigger", "reindex", "--while-paused", "--why", "hotfix"])
        .await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let history = json(&db.cli(&["history", "reindex", "--json"]).await);
    assert_eq!(
        history["controls"][0]["action"], "trigger_while_paused",
        "{kind}: {history}"
    );
    assert_eq!(history["controls"][0]["why"], "hotfix", "{kind}");
    let out = db.cli(&["history", "reindex"]).await;
    assert!(
        text(&out.stdout).contains("trigger_while_paused"),
        "{kind}: {}",
        text(&out.stdout)
    );
}
