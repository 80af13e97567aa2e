//! A normal start logs no notice of the server's and says "created" only once: the
//! run history table is created by one instance of many starting at once, without
//! PostgreSQL's `… already exists, skipping` notices surfacing at INFO.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use scheduler_postgres::{HistoryOptions, PostgresOptions, PostgresStore, RunHistory};
use test_postgres::TestDb;
use tracing_subscriber::fmt::MakeWriter;

/// Every line logged, at any level, while it is the thread's subscriber.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(captured.clone())
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

#[tokio::test]
async fn creating_the_run_history_logs_no_notice_and_says_created_once() {
    let db = TestDb::new().await;
    let a = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("store a");
    let b = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("store b");
    // One thread (a current-thread runtime): every event of both starts is captured.
    let (captured, _guard) = capture();
    let (ha, hb) = tokio::join!(
        RunHistory::new(&a, HistoryOptions::default()),
        RunHistory::new(&b, HistoryOptions::default()),
    );
    ha.expect("history a");
    hb.expect("history b");
    // A later start finds the table.
    RunHistory::new(&a, HistoryOptions::default())
        .await
        .expect("history again");
    let lines = captured.lines();
    let notices: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("already exists") || l.contains("sqlx::postgres::notice"))
        .collect();
    assert!(notices.is_empty(), "notices logged: {notices:#?}");
    let created = lines
        .iter()
        .filter(|l| l.contains("created the run history table"))
        .count();
    assert_eq!(created, 1, "{lines:#?}");
}
