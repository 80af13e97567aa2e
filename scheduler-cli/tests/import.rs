//! `schedules import FILE` through the built binary, on PostgreSQL and on a SQLite
//! file: a thousand rows put in one batch (one audit record), `schedules list
//! --json`'s output imported back as it was, standard input read for `-`; a row
//! that does not check, a file that is not rows, or a handler no instance
//! registered refused with nothing stored (exit 2, 2, 5).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::io::Write as _;
use std::process::{Command, Stdio};

use scheduler_cli::{EXIT_REFUSED, EXIT_USAGE};
use serde_json::{Value, json};
use support::stores::{Db, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_on_postgres() {
    schedules_are_imported_in_one_batch(Db::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_on_sqlite() {
    schedules_are_imported_in_one_batch(Db::sqlite().await).await;
}

/// Writes `value` as JSON into a new file of `dir`; its path.
fn file(dir: &std::path::Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    path.display().to_string()
}

/// How many dynamic schedules the store keeps (not removed).
async fn stored(db: &Db) -> usize {
    let list = json(&db.cli(&["schedules", "list", "--json"]).await);
    list["schedules"].as_array().unwrap().len()
}

async fn schedules_are_imported_in_one_batch(db: Db) {
    let kind = db.kind;
    let dir = tempdir(kind);
    db.controls()
        .register_handlers("node-a", &["send_report".to_owned()])
        .await
        .unwrap();
    let audited = || async {
        db.controls()
            .control_history(None, scheduler_core::Page::default())
            .await
            .unwrap()
            .len()
    };
    let before = audited().await;

    // A thousand rows, as an array: cron rows in a zone and every rows.
    let rows: Vec<Value> = (0..1000)
        .map(|i| {
            if i % 2 == 0 {
                json!({"name": format!("tenant-{i:04}"), "handler": "send_report",
                       "schedule": format!("{} 9 * * *", i % 60), "zone": "Europe/Berlin",
                       "args": {"tenant": i}})
            } else {
                json!({"name": format!("tenant-{i:04}"), "handler": "send_report",
                       "schedule": "every 5m", "scope": "node", "enabled": false,
                       "policy": "overlap = \"skip\""})
            }
        })
        .collect();
    let path = file(&dir, "rows.json", &Value::Array(rows));
    let out = db
        .cli(&[
            "schedules",
            "import",
            &path,
            "--by",
            "ops:carol",
            "--why",
            "tenants",
        ])
        .await;
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("put 1000 dynamic schedules in one batch; every instance picks them up"),
        "{kind}: {stdout}"
    );
    assert_eq!(stored(&db).await, 1000, "{kind}");
    assert_eq!(
        audited().await,
        before + 1,
        "{kind}: one record for the batch"
    );
    let acme = db
        .controls()
        .schedule("tenant-0002")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(acme.zone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(
        serde_json::from_str::<Value>(&acme.args).unwrap(),
        json!({"tenant": 2})
    );
    let other = db
        .controls()
        .schedule("tenant-0003")
        .await
        .unwrap()
        .unwrap();
    assert!(!other.enabled, "{kind}");
    assert_eq!(other.scope, scheduler_core::Scope::Node);
    assert_eq!(other.policy, "overlap = \"skip\"");

    // `schedules list --json`'s output goes back in as it is, through stdin.
    let listed = db.cli(&["schedules", "list", "--json"]).await;
    assert!(listed.status.success());
    for i in 0..1000 {
        let name = format!("tenant-{i:04}");
        db.controls().remove_schedule(&name, "t", "").await.unwrap();
    }
    assert_eq!(stored(&db).await, 0, "{kind}");
    let out = cli_with_stdin(&db, &["schedules", "import", "-", "--json"], &listed.stdout);
    assert!(out.status.success(), "{kind}: {}", text(&out.stderr));
    let answer = json(&out);
    assert_eq!(answer["rows"], 1000, "{kind}: {answer}");
    assert_eq!(
        answer["control"]["action"], "schedule_put",
        "{kind}: {answer}"
    );
    let again = json(&db.cli(&["schedules", "list", "--json"]).await);
    let first = json(&listed);
    let strip = |v: &Value| -> Vec<Value> {
        v["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.as_object_mut().unwrap().remove("version");
                r.as_object_mut().unwrap().remove("updated_at");
                r
            })
            .collect()
    };
    assert_eq!(strip(&again), strip(&first), "{kind}: the same rows");

    // Refusals: nothing stored, the row named.
    let bad = file(
        &dir,
        "bad.json",
        &json!([
            {"name": "new-0", "handler": "send_report", "schedule": "every 1m"},
            {"name": "new-1", "handler": "send_report", "schedule": "every 1ms"}
        ]),
    );
    let out = db.cli(&["schedules", "import", &bad]).await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)), "{kind}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("row 1 (\"new-1\")"), "{kind}: {stderr}");
    assert!(db.controls().schedule("new-0").await.unwrap().is_none());

    let typo = file(
        &dir,
        "typo.json",
        &json!([{"name": "new-0", "handler": "send_report", "shedule": "every 1m"}]),
    );
    let out = db.cli(&["schedules", "import", &typo]).await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)), "{kind}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot import"), "{kind}: {stderr}");

    let missing = dir.join("none.json").display().to_string();
    let out = db.cli(&["schedules", "import", &missing]).await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_USAGE)), "{kind}");

    let unknown = file(
        &dir,
        "unknown.json",
        &json!([
            {"name": "new-0", "handler": "send_report", "schedule": "every 1m"},
            {"name": "new-1", "handler": "nobody", "schedule": "every 1m"}
        ]),
    );
    let out = db.cli(&["schedules", "import", &unknown]).await;
    assert_eq!(
        out.status.code(),
        Some(i32::from(EXIT_REFUSED)),
        "{kind}: {}",
        text(&out.stderr)
    );
    assert!(db.controls().schedule("new-0").await.unwrap().is_none());
    assert_eq!(stored(&db).await, 1000, "{kind}");
}

/// A directory of this test's own, removed when the process ends.
fn tempdir(kind: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cli-import-{kind}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the binary with `args` against `db`, `input` on its standard input.
fn cli_with_stdin(db: &Db, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_scheduler-cli"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("USER", "tester")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}
