//! `pause` and `resume` through the built binary, on PostgreSQL and on a SQLite
//! file: a paused job's take is refused by the store itself (everywhere, or on one
//! node), `resume` lets it through again, and `history` says who did what, and why.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use support::stores::{Db, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_on_postgres() {
    pause_refuses_takes_until_resumed(&Db::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_on_sqlite() {
    pause_refuses_takes_until_resumed(&Db::sqlite().await).await;
}

async fn pause_refuses_takes_until_resumed(db: &Db) {
    let kind = db.kind;
    db.runs("node-a", &["alerts", "sweep", "uptime"]).await;
    db.runs("node-b", &["sweep", "uptime"]).await;

    // Paused everywhere: the take of either node is refused, reported as paused.
    let out = db
        .cli(&["pause", "sweep", "--by", "ops:alice", "--why", "disk full"])
        .await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(
            "paused sweep on every node: its ticks are refused (counted paused) until it is \
             resumed (control "
        ) && stdout.contains(" by ops:alice at ")
            && stdout.ends_with(": \"disk full\")\n"),
        "{kind}: {stdout}"
    );
    for node in ["node-a", "node-b"] {
        let taken = db.take("sweep", node).await;
        assert!(taken.won.is_empty(), "{kind}: {taken:?}");
        assert_eq!(
            taken.paused.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
            ["sweep"],
            "{kind}"
        );
    }
    // Another job is not paused.
    assert_eq!(db.take("alerts", "node-a").await.won.len(), 1, "{kind}");

    // Resumed, without catch-up: taken again. The default actor is the user.
    let out = db.cli(&["resume", "sweep", "--no-catch-up"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(
            "resumed sweep on every node: the ticks paused over are dropped (control "
        ),
        "{kind}: {}",
        text(&out.stdout)
    );
    let taken = db.take("sweep", "node-a").await;
    assert!(taken.paused.is_empty(), "{kind}: {taken:?}");
    assert_eq!(taken.won.len(), 1, "{kind}: {taken:?}");

    // Paused on one node only, as JSON.
    let record = json(
        &db.cli(&[
            "pause",
            "uptime",
            "--node",
            "node-a",
            "--why",
            "maintenance",
            "--json",
        ])
        .await,
    );
    assert_eq!(record["action"], "pause", "{kind}");
    assert_eq!(record["job"], "uptime", "{kind}");
    assert_eq!(record["node"], "node-a", "{kind}");
    assert_eq!(record["why"], "maintenance", "{kind}");
    assert!(
        record["by"].as_str().unwrap().starts_with("cli:tester"),
        "{kind}: {record}"
    );
    let taken = db.take_named("uptime:node-a", "uptime", "node-a").await;
    assert_eq!(taken.paused.len(), 1, "{kind}: {taken:?}");
    let taken = db.take_named("uptime:node-b", "uptime", "node-b").await;
    assert_eq!(taken.won.len(), 1, "{kind}: {taken:?}");

    // The history: newest first, who, what, why.
    let history = json(&db.cli(&["history", "--json"]).await);
    let actions: Vec<(&str, &str, &str)> = history["controls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["action"].as_str().unwrap(),
                c["job"].as_str().unwrap(),
                c["why"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("pause", "uptime", "maintenance"),
            ("resume_no_catch_up", "sweep", ""),
            ("pause", "sweep", "disk full"),
        ],
        "{kind}"
    );
    let sweep = json(&db.cli(&["history", "sweep", "--json"]).await);
    assert_eq!(sweep["job"], "sweep");
    assert_eq!(sweep["controls"].as_array().unwrap().len(), 2, "{kind}");
    assert_eq!(sweep["controls"][1]["by"], "ops:alice", "{kind}");

    // Human, paged: one per page, the flag to the next.
    let out = db.cli(&["history", "sweep", "--limit", "1"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    let newest = sweep["controls"][0]["id"].as_i64().unwrap();
    assert!(stdout.starts_with("ID "), "{kind}: {stdout}");
    assert!(
        stdout.contains(&format!("older controls: --before {newest}\n")),
        "{kind}: {stdout}"
    );
    let out = db
        .cli(&[
            "history",
            "sweep",
            "--before",
            &newest.to_string(),
            "--json",
        ])
        .await;
    let older = json(&out);
    assert_eq!(older["controls"].as_array().unwrap().len(), 1, "{kind}");
    assert_eq!(older["controls"][0]["why"], "disk full", "{kind}");

    // A job name is required; an unknown flag is refused by clap.
    assert_eq!(db.cli(&["pause"]).await.status.code(), Some(2));
    assert_eq!(
        db.cli(&["resume", "sweep", "--catch-up-maybe"])
            .await
            .status
            .code(),
        Some(2)
    );
}
