//! `status` against a database with known leases and runs: the typed rows, the
//! human output and the JSON output carry the expected values.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use scheduler_cli::{Error, LeaseState, Status};
use scheduler_core::Outcome;
use scheduler_postgres::TableName;
use sea_orm::{ConnectionTrait, Database};
use serde_json::Value;
use support::known_leases;
use test_postgres::TestDb;

fn lease<'a>(status: &'a Status, name: &str) -> &'a scheduler_cli::LeaseStatus {
    status
        .leases
        .iter()
        .find(|l| l.lease == name)
        .unwrap_or_else(|| panic!("no lease {name}: {status:#?}"))
}

/// The human output's line for `lease`, split into its columns.
fn line<'a>(human: &'a str, lease: &str) -> &'a str {
    human
        .lines()
        .find(|l| l.split_whitespace().next() == Some(lease))
        .unwrap_or_else(|| panic!("no line for {lease} in\n{human}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_each_lease_with_its_last_run() {
    let db = TestDb::new().await;
    let known = known_leases(db.url(), true).await;
    let conn = scheduler_cli::connect(db.url()).await.expect("connect");
    let status = scheduler_cli::status(&conn, &TableName::default())
        .await
        .expect("status");
    assert_eq!(status.table, "scheduler_leases");
    assert_eq!(
        status.history_table.as_deref(),
        Some("scheduler_leases_runs")
    );
    let names: Vec<&str> = status.leases.iter().map(|l| l.lease.as_str()).collect();
    assert_eq!(names, ["alerts", "reports", "sweep", "uptime:node-a"]);

    let sweep = lease(&status, "sweep");
    assert_eq!(sweep.state, LeaseState::Held);
    assert_eq!(sweep.holder, known.sweep_holder);
    assert_eq!(sweep.token, known.sweep_token);
    assert_eq!(sweep.tick, known.tick);
    assert!(
        (50_000..=60_000).contains(&sweep.expires_in_ms),
        "{sweep:?}"
    );
    let run = sweep.last_run.as_ref().expect("sweep ran");
    assert_eq!(
        run.outcome,
        Outcome::Failed,
        "the latest run, not the older one"
    );
    assert_eq!(run.node, "node-b");
    assert_eq!(
        run.error.as_deref(),
        Some("boom: the disk is full\nat line 2")
    );

    let alerts = lease(&status, "alerts");
    assert_eq!(alerts.state, LeaseState::Released);
    assert!(alerts.released_at.is_some());
    assert!(alerts.expires_in_ms <= 0);
    assert_eq!(alerts.last_run, None);

    let reports = lease(&status, "reports");
    assert_eq!(reports.state, LeaseState::Expired);
    assert_eq!(reports.released_at, None);

    // A node job's lease finds its job's runs on that node only.
    let uptime = lease(&status, "uptime:node-a");
    let run = uptime.last_run.as_ref().expect("uptime ran on node-a");
    assert_eq!(
        (run.node.as_str(), run.outcome.as_str()),
        ("node-a", "succeeded")
    );
    assert!((status.now - run.started).num_seconds() >= 5);

    // Human output: aligned columns, one line per lease.
    let human = status.human();
    eprintln!("{human}");
    let header = human.lines().next().unwrap();
    for column in [
        "LEASE", "HOLDER", "TICK", "TOKEN", "EXPIRES", "LAST RUN", "OUTCOME", "ERROR",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let sweep_line = line(&human, "sweep");
    assert!(sweep_line.contains(&known.sweep_holder), "{sweep_line}");
    assert!(
        sweep_line.contains(" in 5"),
        "expires in ~59 s: {sweep_line}"
    );
    assert!(sweep_line.contains("ago on node-b"), "{sweep_line}");
    assert!(sweep_line.contains("failed"), "{sweep_line}");
    assert!(
        sweep_line.ends_with("boom: the disk is full at line 2"),
        "{sweep_line}"
    );
    let alerts_line = line(&human, "alerts");
    assert!(alerts_line.contains("released"), "{alerts_line}");
    assert_eq!(
        alerts_line.split_whitespace().filter(|c| *c == "-").count(),
        2
    );
    assert!(line(&human, "reports").contains("expired"), "{human}");
    // Aligned: each column starts at the same offset on every line.
    let holder_at = header.find("HOLDER").unwrap();
    for lease in ["alerts", "reports", "sweep", "uptime:node-a"] {
        let l = line(&human, lease);
        assert_eq!(&l[holder_at - 2..holder_at], "  ", "{human}");
        assert_ne!(&l[holder_at..=holder_at], " ", "{human}");
    }

    // JSON: stable field names.
    let json: Value = serde_json::from_str(&status.json().expect("json")).expect("valid JSON");
    assert_eq!(json["table"], "scheduler_leases");
    assert_eq!(json["history_table"], "scheduler_leases_runs");
    let leases = json["leases"].as_array().expect("leases");
    assert_eq!(leases.len(), 4);
    let sweep = leases.iter().find(|l| l["lease"] == "sweep").unwrap();
    assert_eq!(sweep["holder"], known.sweep_holder.as_str());
    assert_eq!(sweep["token"], known.sweep_token);
    assert_eq!(sweep["state"], "held");
    assert!(sweep["expires_in_ms"].as_i64().unwrap() > 0);
    assert_eq!(sweep["released_at"], Value::Null);
    assert_eq!(sweep["last_run"]["outcome"], "failed");
    assert_eq!(sweep["last_run"]["node"], "node-b");
    assert_eq!(sweep["last_run"]["lease_lost"], false);
    assert!(sweep["tick"].as_str().unwrap().ends_with('Z'));
    let alerts = leases.iter().find(|l| l["lease"] == "alerts").unwrap();
    assert_eq!(alerts["state"], "released");
    assert_eq!(alerts["last_run"], Value::Null);
    let reports = leases.iter().find(|l| l["lease"] == "reports").unwrap();
    assert_eq!(reports["state"], "expired");
    assert!(reports["expires_in_ms"].as_i64().unwrap() <= 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_history_table_the_last_run_is_a_dash() {
    let db = TestDb::new().await;
    known_leases(db.url(), false).await;
    let conn = scheduler_cli::connect(db.url()).await.expect("connect");
    let status = scheduler_cli::status(&conn, &TableName::default())
        .await
        .expect("status");
    assert_eq!(status.history_table, None);
    assert!(status.leases.iter().all(|l| l.last_run.is_none()));
    let human = status.human();
    let sweep_line = line(&human, "sweep");
    let cells: Vec<&str> = sweep_line.split_whitespace().collect();
    assert_eq!(cells[cells.len() - 2..], ["-", "-"], "{sweep_line}");
    assert!(
        human.contains("no run history table `scheduler_leases_runs`"),
        "{human}"
    );
    let json: Value = serde_json::from_str(&status.json().unwrap()).unwrap();
    assert_eq!(json["history_table"], Value::Null);
    assert_eq!(json["leases"][0]["last_run"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_the_lease_table_says_so() {
    let db = TestDb::new().await;
    let conn = scheduler_cli::connect(db.url()).await.expect("connect");
    let table = TableName::new("app_a.leases").unwrap();
    let err = scheduler_cli::status(&conn, &table).await.unwrap_err();
    assert!(matches!(err, Error::NoLeaseTable { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "no lease table `app_a.leases` here: has the scheduler run against this database? (--table)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_out_of_range_set_by_hand_are_bad_rows_not_panics() {
    let db = TestDb::new().await;
    known_leases(db.url(), true).await;
    let admin = Database::connect(db.direct_url()).await.expect("connect");
    let conn = scheduler_cli::connect(db.url()).await.expect("connect");
    // PostgreSQL's timestamps reach further than chrono's, and 'infinity' further
    // still: decoding one unchecked overflows, a panic inside sqlx.
    let (lease, last_run) = (
        "scheduler_leases WHERE name = 'sweep'",
        "scheduler_leases_runs WHERE job = 'sweep' AND node = 'node-b'",
    );
    let cases = [
        (
            lease,
            "expires_at",
            "infinity",
            "expires_at holds infinity, outside the range of timestamps this tool can show",
        ),
        (
            lease,
            "expires_at",
            "-infinity",
            "expires_at holds -infinity, outside the range of timestamps this tool can show",
        ),
        (
            lease,
            "expires_at",
            "294000-01-01 00:00:00+00",
            "expires_at holds a timestamp outside the range this tool can show (years -262143 to 262142)",
        ),
        (
            lease,
            "tick",
            "infinity",
            "tick holds infinity, outside the range of timestamps this tool can show",
        ),
        (
            lease,
            "taken_at",
            "-infinity",
            "taken_at holds -infinity, outside the range of timestamps this tool can show",
        ),
        (
            lease,
            "released_at",
            "infinity",
            "released_at holds infinity, outside the range of timestamps this tool can show",
        ),
        (
            last_run,
            "started",
            "infinity",
            "the started of its last run holds infinity, outside the range of timestamps this tool can show",
        ),
        (
            last_run,
            "finished",
            "-infinity",
            "the finished of its last run holds -infinity, outside the range of timestamps this tool can show",
        ),
    ];
    for (row, column, value, says) in cases {
        let (table, filter) = row.split_once(" WHERE ").unwrap();
        let set = |to: &str| format!("UPDATE {table} SET {column} = {to} WHERE {filter}");
        admin
            .execute_unprepared(&set(&format!("'{value}'")))
            .await
            .expect("set by hand");
        let err = scheduler_cli::status(&conn, &TableName::default())
            .await
            .expect_err("refused");
        let msg = err.to_string();
        println!("{table}.{column} = {value}: {msg}");
        assert!(matches!(err, Error::BadRow(_)), "{err:?}");
        assert_eq!(
            msg,
            format!(
                "unexpected row in the lease table while trying to read the lease table: lease \"sweep\": \
                 {says}; was the table altered by hand?"
            )
        );
        // Set back to a real time (or none), the lease reads again.
        let restore = if column == "released_at" {
            "NULL"
        } else {
            "now()"
        };
        admin
            .execute_unprepared(&set(restore))
            .await
            .expect("restore");
        let status = scheduler_cli::status(&conn, &TableName::default())
            .await
            .expect("status");
        assert_eq!(status.leases.len(), 4);
    }
}
