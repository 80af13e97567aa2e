//! Two instances starting at once on one file: the run history table is created by
//! one of them, and only that one says it created it.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use scheduler_sqlite::{HistoryOptions, RunHistory, SqliteOptions, SqliteStore};
use support::TempDir;
use tracing_subscriber::fmt::MakeWriter;

/// Every line logged while it is the thread's subscriber.
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

#[tokio::test]
async fn two_instances_starting_at_once_say_created_once() {
    let dir = TempDir::new("quiet-start");
    let a = SqliteStore::open(dir.join("leases.db"), SqliteOptions::default())
        .await
        .expect("open a");
    let b = SqliteStore::open(dir.join("leases.db"), SqliteOptions::default())
        .await
        .expect("open b");
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(captured.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let (ha, hb) = tokio::join!(
        RunHistory::new(&a, HistoryOptions::default()),
        RunHistory::new(&b, HistoryOptions::default()),
    );
    ha.expect("history a");
    hb.expect("history b");
    let text = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    let created = text
        .lines()
        .filter(|l| l.contains("created the run history table"))
        .count();
    assert_eq!(created, 1, "{text}");
}
