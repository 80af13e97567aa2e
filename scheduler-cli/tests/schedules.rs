//! `schedules put | list | rm` through the built binary, on PostgreSQL and on a
//! SQLite file: a row bound to a registered handler is stored and listed, removed
//! once; an unknown handler is refused by the store (exit 5), a schedule, policy or
//! arguments that do not check are refused before anything is opened (exit 2).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use scheduler_cli::{EXIT_MISSING, EXIT_REFUSED};
use serde_json::json;
use support::stores::{Db, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_on_postgres() {
    schedules_are_put_listed_and_removed(Db::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_on_sqlite() {
    schedules_are_put_listed_and_removed(Db::sqlite().await).await;
}

async fn schedules_are_put_listed_and_removed(db: Db) {
    let kind = db.kind;
    db.controls()
        .register_handlers("node-a", &["send_report".to_owned()])
        .await
        .unwrap();

    let out = db.cli(&["schedules", "list"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no dynamic schedules\n", "{kind}");

    // A cron row in a zone, with a policy and arguments; an every row, disabled.
    let out = db
        .cli(&[
            "schedules",
            "put",
            "report-acme",
            "--handler",
            "send_report",
            "--cron",
            "0 0 9 * * Mon-Fri",
            "--zone",
            "Europe/Berlin",
            "--scope",
            "node",
            "--policy",
            r#"overlap = "skip", retry = 2"#,
            "--args",
            r#"{"tenant": "acme"}"#,
            "--by",
            "ops:carol",
            "--why",
            "new tenant",
        ])
        .await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(
            "stored dynamic schedule report-acme; every instance picks it up within a poll \
             interval (control "
        ) && stdout.contains(" by ops:carol at ")
            && stdout.ends_with(": \"new tenant\")\n"),
        "{kind}: {stdout}"
    );
    let record = json(
        &db.cli(&[
            "schedules",
            "put",
            "cleanup",
            "--handler",
            "send_report",
            "--every",
            "30s",
            "--disabled",
            "--json",
        ])
        .await,
    );
    assert_eq!(record["action"], "schedule_put", "{kind}");
    assert_eq!(record["job"], "cleanup", "{kind}");

    let list = json(&db.cli(&["schedules", "list", "--json"]).await);
    let rows = list["schedules"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{kind}: {list}");
    let (cleanup, acme) = (&rows[0], &rows[1]);
    assert_eq!(cleanup["name"], "cleanup", "{kind}");
    assert_eq!(cleanup["schedule"], "every 30s", "{kind}");
    assert_eq!(cleanup["enabled"], false, "{kind}");
    assert_eq!(cleanup["scope"], "cluster", "{kind}");
    assert_eq!(cleanup["args"], json!({}), "{kind}");
    assert_eq!(acme["handler"], "send_report", "{kind}");
    assert_eq!(acme["schedule"], "0 0 9 * * Mon-Fri", "{kind}");
    assert_eq!(acme["zone"], "Europe/Berlin", "{kind}");
    assert_eq!(acme["scope"], "node", "{kind}");
    assert_eq!(acme["policy"], r#"overlap = "skip", retry = 2"#, "{kind}");
    assert_eq!(acme["args"], json!({"tenant": "acme"}), "{kind}");
    assert_eq!(acme["enabled"], true, "{kind}");
    assert!(acme["updated_at"].is_string(), "{kind}: {acme}");

    let out = db.cli(&["schedules", "list"]).await;
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    assert!(stdout.starts_with("NAME "), "{kind}: {stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("report-acme ")
            && l.contains("Europe/Berlin")
            && l.contains("overlap = \"skip\", retry = 2")
            && l.ends_with(r#"{"tenant": "acme"}"#)),
        "{kind}: {stdout}"
    );

    // A handler no instance registered: refused by the store, nothing stored.
    let out = db
        .cli(&[
            "schedules",
            "put",
            "x",
            "--handler",
            "nope",
            "--every",
            "1m",
        ])
        .await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_REFUSED)), "{kind}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("error: ") && stderr.contains("nope") && stderr.lines().count() == 1,
        "{kind}: {stderr}"
    );
    assert!(out.stdout.is_empty());

    // Refused while parsing, before any database is opened: exit 2.
    for (args, says) in [
        (&["--cron", "not cron"][..], "--cron"),
        (&["--every", "soon"], "--every"),
        (
            &["--cron", "0 0 9 * * *", "--zone", "Mars/Olympus"],
            "Mars/Olympus",
        ),
        (
            &["--every", "1m", "--policy", "overlap = sometimes"],
            "overlap",
        ),
        (&["--every", "1m", "--args", "{not json"], "not JSON"),
        (&["--every", "1m", "--scope", "galaxy"], "galaxy"),
        (&["--every", "1m", "--cron", "0 * * * * *"], "--cron"),
        (&["--every", "1m", "--zone", "UTC"], "--zone"),
        (&[][..], "--cron"),
    ] {
        let mut line = vec!["schedules", "put", "y", "--handler", "send_report"];
        line.extend_from_slice(args);
        let out = db.cli(&line).await;
        assert_eq!(out.status.code(), Some(2), "{kind}: {line:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with("error: ") && stderr.contains(says),
            "{kind}: {line:?}: {stderr}"
        );
    }
    // A name the store cannot keep: checked by the row, exit 2.
    let long = "n".repeat(300);
    let out = db
        .cli(&[
            "schedules",
            "put",
            &long,
            "--handler",
            "send_report",
            "--every",
            "1m",
        ])
        .await;
    assert_eq!(out.status.code(), Some(2), "{kind}: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("error: invalid name "),
        "{kind}"
    );

    // Removed once; the second time there is none: exit 4.
    let out = db
        .cli(&["schedules", "rm", "cleanup", "--why", "replaced"])
        .await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(
            "removed dynamic schedule cleanup; every instance stops running it within a poll \
             interval (control "
        ),
        "{kind}: {}",
        text(&out.stdout)
    );
    let out = db.cli(&["schedules", "remove", "cleanup", "--json"]).await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_MISSING)), "{kind}");
    let gone: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        gone,
        json!({"name": "cleanup", "removed": false, "control": null})
    );
    let out = db.cli(&["schedules", "rm", "cleanup"]).await;
    assert_eq!(
        text(&out.stdout),
        "no dynamic schedule named cleanup (`schedules list` shows them)\n"
    );

    let list = json(&db.cli(&["schedules", "list", "--json"]).await);
    let names: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["report-acme"], "{kind}");

    // Every change is in the history.
    let history = json(&db.cli(&["history", "--json"]).await);
    let actions: Vec<(&str, &str)> = history["controls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["action"].as_str().unwrap(), c["job"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("schedule_remove", "cleanup"),
            ("schedule_put", "cleanup"),
            ("schedule_put", "report-acme"),
        ],
        "{kind}"
    );
}
