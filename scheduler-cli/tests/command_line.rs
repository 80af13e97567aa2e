//! The built binary end to end: exit codes, stdout and stderr.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::net::TcpListener;
use std::process::{Command, Output};

use sea_orm::{ConnectionTrait, Database};
use serde_json::Value;
use support::known_leases;
use test_postgres::TestDb;

/// Runs the binary with `args` and `DATABASE_URL` set to `url` (or unset), off the
/// async workers.
async fn cli(url: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_scheduler-cli"));
    command.args(args).env_remove("DATABASE_URL");
    if let Some(url) = url {
        command.env("DATABASE_URL", url);
    }
    tokio::task::spawn_blocking(move || command.output().expect("run scheduler-cli"))
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_prints_status_and_locks_and_fails_with_exit_code_one() {
    let db = TestDb::new().await;
    let known = known_leases(db.url(), true).await;

    let out = cli(Some(db.url()), &["status", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let leases = json["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 4);
    let sweep = leases.iter().find(|l| l["lease"] == "sweep").unwrap();
    assert_eq!(sweep["holder"], known.sweep_holder.as_str());
    assert_eq!(sweep["last_run"]["outcome"], "failed");

    // --database-url instead of the environment; human output.
    let out = cli(None, &["--database-url", db.url(), "status"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    assert!(stdout.starts_with("LEASE "), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("sweep ") && l.contains("failed")),
        "{stdout}"
    );

    // An idle session holding an advisory lock, flagged in `locks`.
    let holder = Database::connect(db.url()).await.unwrap();
    holder
        .execute_unprepared("SELECT pg_advisory_lock(42)")
        .await
        .unwrap();
    let out = cli(Some(db.url()), &["locks"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        stdout.contains("PINNED") && stdout.contains("warning: pid"),
        "{stdout}"
    );
    let out = cli(Some(db.url()), &["locks", "--json"]).await;
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["locks"][0]["key"], 42);
    assert_eq!(json["locks"][0]["pinned"], true);

    // Errors: a message on stderr, nothing on stdout, exit code 1.
    let out = cli(Some(db.url()), &["status", "--table", "other_leases"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        "error: no lease table `other_leases` here: has the scheduler run against this database? (--table)\n"
    );
    let out = cli(None, &["status"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("pass --database-url or set DATABASE_URL"));
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let unreachable = format!("postgres://postgres@127.0.0.1:{closed}/nowhere");
    let out = cli(Some(&unreachable), &["status", "--connect-timeout", "1"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: cannot connect to the database"),
        "{}",
        text(&out.stderr)
    );
}
