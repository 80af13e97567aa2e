//! A database URL is read as written or refused in words: a SQLite file's plain path
//! opens that file, a PostgreSQL URL without a database name is refused (the server
//! would pick the user's own database, `postgres`: a second cluster), and a scheme
//! the tool does not read is refused with the forms it reads.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use support::stores::{Db, cli, json, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_files_path_opens_that_file() {
    let db = Db::sqlite().await;
    let path = std::path::PathBuf::from(db.url.strip_prefix("sqlite://").unwrap());
    assert!(path.is_absolute());
    let history = json(&cli(Some(path.to_str().unwrap()), &["history", "--json"]).await);
    assert_eq!(history["controls"].as_array().unwrap().len(), 0);
    // Relative to the working directory, as a shell user writes it.
    for relative in ["app.db", "./app.db"] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_scheduler-cli"));
        command
            .current_dir(path.parent().unwrap())
            .args(["history", "--json"])
            .env("DATABASE_URL", relative);
        let out = tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap();
        assert!(out.status.success(), "{relative}: {}", text(&out.stderr));
    }
    // A path to no file: never created.
    let missing = path.with_file_name("nowhere.db");
    let out = cli(Some(missing.to_str().unwrap()), &["history"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: no SQLite database at "),
        "{}",
        text(&out.stderr)
    );
    assert!(!missing.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_the_tool_does_not_read_are_refused_in_words() {
    for url in ["mysql://app@db/app", "sqlite3:///var/lib/app.db"] {
        let out = cli(Some(url), &["history"]).await;
        assert_eq!(out.status.code(), Some(1), "{url}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("postgres://") && stderr.contains("sqlite:///"),
            "{url}: {stderr}"
        );
        assert!(!stderr.contains("must start with postgres://"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_url_without_a_database_is_refused() {
    let db = Db::postgres().await;
    // The same server, no database named.
    let (server, _) = db.url.rsplit_once('/').unwrap();
    for url in [server.to_owned(), format!("{server}/")] {
        let out = cli(Some(&url), &["history"]).await;
        assert_eq!(out.status.code(), Some(1), "{url}");
        assert!(
            text(&out.stderr).contains("the URL names no database: write postgres://host/DBNAME"),
            "{url}: {}",
            text(&out.stderr)
        );
    }
}
