//! Which store the binary opens: a `sqlite:` URL opens that SQLite file (never
//! creating one), any other PostgreSQL; `--table` applies to both; the commands
//! that read PostgreSQL's own tables say so on SQLite.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::sync::Arc;

use scheduler_sqlite::{SqliteOptions, SqliteStore};
use support::stores::{Db, TempDir, cli, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_only_commands_say_so_on_sqlite() {
    let db = Db::sqlite().await;
    let path = db.url.strip_prefix("sqlite://").unwrap().to_owned();
    for command in ["status", "locks"] {
        let out = db.cli(&[command]).await;
        assert_eq!(out.status.code(), Some(1), "{command}");
        assert_eq!(
            text(&out.stderr),
            format!(
                "error: `{command}` works on PostgreSQL only, and {path} is a SQLite file; \
                 `history` and `schedules list` work on both\n"
            )
        );
        assert!(out.stdout.is_empty());
    }
    let out = db.cli(&["forget", "sweep", "--force"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("error: `forget` works on PostgreSQL only"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_urls_name_an_existing_file() {
    let dir = TempDir::new("urls");
    let missing = dir.join("nowhere.db");
    let out = cli(
        Some(&format!("sqlite://{}", missing.display())),
        &["history"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: no SQLite database at {}: give the path of the file the app opens (this \
             tool never creates one)\n",
            missing.display()
        )
    );
    assert!(!missing.exists(), "the CLI created the file");

    let out = cli(Some("sqlite://app.db?mode=ro"), &["history"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with(
            "error: bad SQLite URL \"sqlite://app.db?mode=ro\": URL options (?mode=…) are not \
             supported"
        ),
        "{}",
        text(&out.stderr)
    );

    // sqlite:///absolute and sqlite:relative, on a lease table of the app's choosing.
    let path = dir.join("app.db");
    let store = SqliteStore::open(&path, SqliteOptions::default().table("app_leases").unwrap())
        .await
        .unwrap();
    let store = Arc::new(store);
    scheduler_core::Store::controls(&*store)
        .unwrap()
        .register_jobs("node-a", &["sweep".to_owned()])
        .await
        .unwrap();
    let absolute = format!("sqlite://{}", path.display());
    assert!(absolute.starts_with("sqlite:///"));
    let out = cli(
        Some(&absolute),
        &["--table", "app_leases", "pause", "sweep", "--why", "x"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let relative = {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_scheduler-cli"));
        command
            .current_dir(dir.path())
            .args(["--table", "app_leases", "history", "--json"])
            .env("DATABASE_URL", "sqlite:app.db");
        tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap()
    };
    let history = json(&relative);
    assert_eq!(history["controls"][0]["action"], "pause");
    assert_eq!(
        scheduler_core::Store::controls(&*store)
            .unwrap()
            .control_history(None, Default::default())
            .await
            .unwrap()
            .len(),
        1
    );

    // The default table is not there: an error naming it, exit 1.
    let out = cli(Some(&absolute), &["history"]).await;
    assert_eq!(out.status.code(), Some(1));
    eprintln!("{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("scheduler_leases"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_on_postgres_follow_the_table_flag() {
    let db = test_postgres::TestDb::new().await;
    let options = scheduler_postgres::PostgresOptions::default()
        .table("app_a.leases")
        .unwrap()
        .create_schema(true);
    let store = scheduler_postgres::PostgresStore::connect(db.url(), options)
        .await
        .unwrap();
    scheduler_core::Store::controls(&store)
        .unwrap()
        .register_jobs("node-a", &["sweep".to_owned()])
        .await
        .unwrap();
    let out = cli(
        Some(db.url()),
        &["--table", "app_a.leases", "pause", "sweep", "--json"],
    )
    .await;
    let record = json(&out);
    assert_eq!(record["job"], "sweep");
    let out = cli(
        Some(db.url()),
        &["--table", "app_a.leases", "history", "--json"],
    )
    .await;
    assert_eq!(json(&out)["controls"][0]["action"], "pause");
    // The default table has no control tables here: an error, exit 1.
    let out = cli(Some(db.url()), &["history"]).await;
    assert_eq!(out.status.code(), Some(1));
    eprintln!("{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
}
