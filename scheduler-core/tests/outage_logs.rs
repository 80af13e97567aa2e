//! A store outage is told in lines a person can read: one warning when the store
//! stops answering, a reminder at most every 30 s, one line when it answers again
//! (how long, how many calls failed, how many ticks were passed over), and the ticks
//! passed over meanwhile summed up in that line rather than one warning per job per
//! second. The counters still count every failure and every tick.
//!
//! On the in-memory store, on paused tokio time.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use scheduler_core::Outcome;
use support::{Log, Probe, builder, store};

/// What the test's subscriber printed, shared with its writer.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

#[tokio::test(start_paused = true)]
async fn an_outage_is_a_few_lines_not_a_flood() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (store, log) = (store(), Log::default());
    let names = ["a", "b", "c", "d"];
    let mut b = builder(&store);
    for name in names {
        b = b.job(Probe::new(name, &store, &log));
    }
    let scheduler = b.build().expect("build");
    let stats = scheduler.stats();
    let outage = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let before = lines.text().lines().count();
        store.set_failing(true);
        // 70 s without a store: four jobs every second.
        tokio::time::sleep(Duration::from_secs(70)).await;
        store.set_failing(false);
        tokio::time::sleep(Duration::from_secs(20)).await;
        before
    };
    let (_, before) = tokio::join!(
        scheduler.run_until(tokio::time::sleep(Duration::from_secs(100))),
        outage
    );
    let text = lines.text();
    let during: Vec<&str> = text.lines().skip(before).collect();
    let warnings: Vec<&&str> = during.iter().filter(|l| l.contains("WARN")).collect();
    // The first failure, and a reminder every 30 s of the 70: three or four lines
    // (a run's own warnings aside: the probe's runs only record themselves).
    assert!(
        (1..=4).contains(&warnings.len()),
        "{} warnings during the outage:\n{}",
        warnings.len(),
        during.join("\n")
    );
    assert!(
        warnings[0].contains("the store is unreachable or failing"),
        "{}",
        warnings[0]
    );
    let back: Vec<&&str> = during
        .iter()
        .filter(|l| l.contains("the store answers again"))
        .collect();
    assert_eq!(back.len(), 1, "{}", during.join("\n"));
    assert!(
        back[0].contains("calls_failed=") && back[0].contains("ticks_passed_over="),
        "{}",
        back[0]
    );
    // Every passed-over tick is still counted.
    let passed: u64 = names
        .iter()
        .map(|n| stats.count(n, Outcome::Coalesced) + stats.count(n, Outcome::Missed))
        .sum();
    assert!(passed > 0, "the outage passed ticks over");
    assert!(
        back[0].contains(&format!("ticks_passed_over={passed}")),
        "{passed} counted: {}",
        back[0]
    );
}
