//! `instances` lists the instances that recorded a heartbeat (live, stopped,
//! expired), and `trigger` of a job no live instance runs warns on stderr (the
//! trigger is stored all the same: an instance that runs the job claims it once it
//! starts).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::time::Duration;

use scheduler_core::Heartbeat;
use support::stores::{Db, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_listed_on_postgres() {
    instances_are_listed(&Db::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_listed_on_sqlite() {
    instances_are_listed(&Db::sqlite().await).await;
}

async fn instances_are_listed(db: &Db) {
    let kind = db.kind;
    let out = db.cli(&["instances"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "no instance has recorded a heartbeat\n");

    // `sweep` ran once (it stays known), and node-a runs it.
    assert_eq!(db.take("sweep", "node-a").await.won.len(), 1, "{kind}");
    db.controls()
        .register_jobs("node-a", &["sweep".to_owned()])
        .await
        .unwrap();
    let started = db.store.now().await.unwrap();
    db.controls()
        .heartbeat(&Heartbeat {
            node: "node-a".to_owned(),
            version: "app 7.1".to_owned(),
            started_at: started,
            every: Duration::from_secs(60),
        })
        .await
        .unwrap();
    let listed = json(&db.cli(&["instances", "--json"]).await);
    let rows = listed["instances"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{kind}: {listed}");
    assert_eq!(rows[0]["node"], "node-a", "{kind}");
    assert_eq!(rows[0]["version"], "app 7.1", "{kind}");
    assert_eq!(rows[0]["state"], "live", "{kind}");
    assert_eq!(rows[0]["jobs"], serde_json::json!(["sweep"]), "{kind}");
    assert_eq!(rows[0]["handlers"], serde_json::json!([]), "{kind}");
    let out = db.cli(&["instances"]).await;
    let human = text(&out.stdout);
    assert!(
        human.starts_with("NODE    VERSION  STATE  STARTED"),
        "{kind}: {human}"
    );
    assert!(human.contains("node-a  app 7.1  live"), "{kind}: {human}");

    // A live instance runs it: no warning.
    let out = db.cli(&["trigger", "sweep"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "{kind}");

    // Stopped: listed so, and a trigger warns (and is stored).
    db.controls().stopped("node-a").await.unwrap();
    let listed = json(&db.cli(&["instances", "--json"]).await);
    assert_eq!(listed["instances"][0]["state"], "stopped", "{kind}");
    let out = db.cli(&["trigger", "sweep"]).await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "warning: no live instance runs job \"sweep\": the trigger waits until one that runs \
         it starts (`scheduler-cli instances` lists them)\n",
        "{kind}"
    );
    let history = json(&db.cli(&["history", "--json"]).await);
    assert_eq!(history["controls"].as_array().unwrap().len(), 2, "{kind}");
}
