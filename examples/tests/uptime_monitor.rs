#![allow(clippy::expect_used, clippy::unwrap_used)]
//! `uptime_monitor` started several times at once on a fresh database (whose lease
//! table says the jobs ran before), as its header says to: every instance starts (its `CREATE TABLE IF NOT EXISTS`, unguarded, made
//! all but one fail on a unique index of the catalog), the sample rows are there
//! once, and the runs are recorded in the run history, which `scheduler-cli status`
//! shows as each lease's last run.

mod support;

use std::process::{Command, Output, Stdio};

use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use support::example;
use test_postgres::TestDb;

/// Instances per round, and rounds (each on a fresh database): a race the instances
/// may happen to miss in one round is hardly missed in all.
const INSTANCES: usize = 4;
const ROUNDS: usize = 3;

async fn start_together(url: &str) -> Vec<Output> {
    let children: Vec<_> = (0..INSTANCES)
        .map(|i| {
            Command::new(example("uptime_monitor"))
                .args(["--database-url", url, "--seconds", "4", "--node"])
                .arg(if i % 2 == 0 { "node-a" } else { "node-b" })
                .env("RUST_LOG", "warn")
                .env_remove("RUN_SECONDS")
                .env_remove("NODE_ID")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start uptime_monitor")
        })
        .collect();
    let mut outputs = Vec::new();
    for child in children {
        let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
        outputs.push(
            waited
                .await
                .expect("join")
                .expect("wait for uptime_monitor"),
        );
    }
    outputs
}

/// The scheduler's tables, with each job's lease recorded as run two hours ago: the
/// instances start as a cluster that ran these jobs before (a deploy), so start-up
/// catches up each job's latest tick and every job runs within the few seconds the
/// round lasts. (On a database where a job never ran, no tick from before the start
/// runs: an hourly job would not run in them.) The example's own tables are not
/// created here: the instances still race to create them.
async fn ran_before(url: &str) {
    use scheduler_postgres::{PostgresOptions, PostgresStore};
    drop(
        PostgresStore::connect(url, PostgresOptions::default())
            .await
            .expect("create the scheduler's tables"),
    );
    let db = Database::connect(url).await.expect("connect");
    let sql = "INSERT INTO scheduler_leases (name, holder, tick, token, taken_at, expires_at, released_at) \
               SELECT n, '', now() - interval '2 hours', 1, now(), now(), now() \
               FROM unnest(ARRAY['sweep', 'alert-evaluation', 'mail-checks', \
                                 'uptime-checks:node-a', 'uptime-checks:node-b']) AS n";
    db.execute_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn rows(url: &str, sql: &str) -> Vec<(String, String, String)> {
    let db = Database::connect(url).await.expect("connect");
    db.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| {
            (
                r.try_get("", "a").expect("a"),
                r.try_get("", "b").expect("b"),
                r.try_get("", "c").expect("c"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_started_together_on_a_fresh_database_all_run_and_record_their_runs() {
    for round in 1..=ROUNDS {
        let db = TestDb::new().await;
        ran_before(db.url()).await;
        let outputs = start_together(db.url()).await;
        let failed: Vec<String> = outputs
            .iter()
            .filter(|o| !o.status.success())
            .map(|o| {
                format!(
                    "{}: {}{}",
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .collect();
        assert!(
            failed.is_empty(),
            "round {round}: {} of {INSTANCES} instances failed:\n{}",
            failed.len(),
            failed.join("\n")
        );

        // The sample rows were inserted once, not once per instance.
        let monitors = rows(
            db.direct_url(),
            "SELECT count(*)::text AS a, '' AS b, '' AS c FROM monitors",
        )
        .await;
        assert_eq!(monitors[0].0, "3", "round {round}");

        // Each job's run is in the history, node jobs once per node.
        let runs = rows(
            db.direct_url(),
            "SELECT job AS a, node AS b, outcome AS c FROM scheduler_leases_runs ORDER BY 1, 2",
        )
        .await;
        for (job, node) in [
            ("sweep", None),
            ("alert-evaluation", None),
            ("uptime-checks", Some("node-a")),
            ("uptime-checks", Some("node-b")),
        ] {
            assert!(
                runs.iter().any(|(j, n, outcome)| j == job
                    && node.is_none_or(|node| n == node)
                    && outcome == "succeeded"),
                "round {round}: no succeeded run of {job} {node:?} in the history: {runs:?}"
            );
        }
    }
}
