#![allow(clippy::expect_used, clippy::unwrap_used)]
//! `fenced_payout` on a fresh database: the fenced job pays out, the stale holder's
//! write is refused after a takeover, and the demo lease is ended before the example
//! exits, its row kept with the taking-over holder's token.

mod support;

use std::process::Command;

use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use support::example;
use test_postgres::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pays_out_refuses_the_stale_holder_and_ends_its_demo_lease() {
    let db = TestDb::new().await;
    let url = db.url().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(example("fenced_payout"))
            // Long enough for a tick of the job (every 5 s) to fall: on a fresh
            // database, none from before the start runs.
            .args(["--database-url", &url, "--seconds", "7"])
            .env("RUST_LOG", "warn")
            .env_remove("RUN_SECONDS")
            .output()
    })
    .await
    .expect("join")
    .expect("run fenced_payout");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("paid out for tick "), "{stdout}");
    let stale = stdout
        .lines()
        .find(|l| l.starts_with("stale holder with token "))
        .unwrap_or_else(|| panic!("no stale holder line: {stdout}"));
    assert!(!stale.contains("must not happen"), "{stale}");
    // `stale holder with token N after a takeover (token N+1): …`
    let new_token: i64 = stale
        .split("(token ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no takeover token in {stale}"));
    assert!(
        stdout.contains(&format!(
            "demo lease stale-demo ended (token {new_token}): nobody holds it"
        )),
        "{stdout}"
    );

    let conn = Database::connect(db.direct_url()).await.expect("connect");
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT token, expires_at <= now() AS ended FROM scheduler_leases \
             WHERE name = 'stale-demo'",
        ))
        .await
        .expect("read the lease table")
        .expect("the demo lease's row is kept");
    assert_eq!(row.try_get::<i64>("", "token").unwrap(), new_token);
    assert!(row.try_get::<bool>("", "ended").unwrap());
    let payouts = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM payouts",
        ))
        .await
        .expect("count payouts")
        .expect("a row");
    assert!(payouts.try_get::<i64>("", "n").unwrap() >= 1);
}
