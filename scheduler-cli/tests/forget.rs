//! `forget` end to end, through the built binary: a held lease is refused (exit code
//! 3) unless `--force`, an expired or released one is left as it is (0), a missing
//! name is said so (4), a missing table is an error (1); the row stays, so the name
//! taken again gets a greater fencing token.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use scheduler_cli::{EXIT_HELD, EXIT_MISSING, LeaseState};
use scheduler_core::{LeaseName, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::TableName;
use serde_json::Value;
use support::known_leases;
use test_postgres::TestDb;

/// Runs the binary with `args` against `url`, off the async workers.
async fn cli(url: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_scheduler-cli"));
    command.args(args).env("DATABASE_URL", url);
    tokio::task::spawn_blocking(move || command.output().expect("run scheduler-cli"))
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_refuses_a_held_lease_unless_forced_and_keeps_its_token() {
    let db = TestDb::new().await;
    let known = known_leases(db.url(), false).await;
    let token = |name: &str| {
        let store = known.store.clone();
        let name = name.to_owned();
        async move {
            let status = scheduler_cli::status(&store, &TableName::default())
                .await
                .expect("status");
            let lease = status.leases.into_iter().find(|l| l.lease == name).unwrap();
            (lease.state, lease.token)
        }
    };

    // Held: refused, with its holder and expiry; nothing written.
    let out = cli(db.url(), &["forget", "sweep"]).await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_HELD)));
    assert_eq!(EXIT_HELD, 3);
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(&format!(
            "lease sweep is held by {} until ",
            known.sweep_holder
        )) && stdout.ends_with("; pass --force to forget it anyway\n"),
        "{stdout}"
    );
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert_eq!(token("sweep").await, (LeaseState::Held, known.sweep_token));

    // The same, as JSON.
    let out = cli(db.url(), &["forget", "sweep", "--json"]).await;
    assert_eq!(out.status.code(), Some(3));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["outcome"], "held");
    assert_eq!(json["lease"], "sweep");
    assert_eq!(json["table"], "scheduler_leases");
    assert_eq!(json["force"], false);
    assert_eq!(json["holder"], known.sweep_holder.as_str());
    assert_eq!(json["token"], known.sweep_token);
    assert_eq!(json["state"], "held");
    assert!(json["expires_at"].is_string(), "{json}");

    // Forced: forgotten, the row kept, expired, with its token.
    let out = cli(db.url(), &["forget", "--force", "sweep"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "forgot lease sweep: {} (fencing token {}) no longer holds it; the row stays, \
             so the next take gets a greater token\n",
            known.sweep_holder, known.sweep_token
        )
    );
    assert_eq!(
        token("sweep").await,
        (LeaseState::Expired, known.sweep_token)
    );

    // Taken again: a greater token.
    let tick = Tick::new(known.store.now().await.expect("now"));
    let request = TakeRequest::new(LeaseName::new("sweep").unwrap(), tick);
    let ttl = Ttl::new(Duration::from_secs(60)).unwrap();
    let taken = known.store.take(&[request], ttl).await.expect("take");
    let lease = taken.won.first().expect("sweep is free");
    assert!(lease.token.get() > known.sweep_token, "{lease:?}");

    // Expired or released: nothing to forget, exit code 0, forced or not.
    for args in [
        &["forget", "reports"][..],
        &["forget", "reports", "--force"],
    ] {
        let out = cli(db.url(), args).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("lease reports is not held (expired by ")
                && stdout.ends_with("): nothing to forget, the next take wins it\n"),
            "{stdout}"
        );
    }
    let out = cli(db.url(), &["forget", "alerts", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(
        (&json["outcome"], &json["state"]),
        (&Value::from("not_held"), &Value::from("released"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_says_when_there_is_no_such_lease_or_table() {
    let db = TestDb::new().await;
    known_leases(db.url(), false).await;

    let out = cli(db.url(), &["forget", "uptime"]).await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_MISSING)));
    assert_eq!(EXIT_MISSING, 4);
    assert_eq!(
        text(&out.stdout),
        "no lease named uptime in `scheduler_leases`\n"
    );
    let out = cli(db.url(), &["forget", "uptime", "--force", "--json"]).await;
    assert_eq!(out.status.code(), Some(4));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["outcome"], "missing");
    assert_eq!(json["holder"], Value::Null);

    // No table: an error, on stderr, exit code 1.
    let out = cli(db.url(), &["forget", "sweep", "--table", "other_leases"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        "error: no lease table `other_leases` here: has the scheduler run against this database? (--table)\n"
    );

    // A name is required.
    let out = cli(db.url(), &["forget"]).await;
    assert_eq!(out.status.code(), Some(2));
}
