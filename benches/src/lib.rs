//! Shared set-up of the benchmarks: a throwaway PostgreSQL server (or `DATABASE_URL`),
//! and a table of mean times printed as ratios to a baseline measured in the same run.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::sync::Mutex;
use std::time::Duration;

/// Mean times per operation, gathered while criterion runs.
#[derive(Debug, Default)]
pub struct Ratios {
    rows: Mutex<Vec<(String, Duration, u64, u64)>>,
}

impl Ratios {
    pub const fn new() -> Self {
        Self {
            rows: Mutex::new(Vec::new()),
        }
    }

    /// Records `iters` operations of `name` (each handling `elements` items) taking `total`.
    pub fn record(&self, name: &str, total: Duration, iters: u64, elements: u64) {
        let mut rows = self.rows.lock().unwrap();
        match rows.iter_mut().find(|r| r.0 == name) {
            Some(row) => {
                row.1 += total;
                row.2 += iters;
            }
            None => rows.push((name.to_owned(), total, iters, elements)),
        }
    }

    /// Prints every operation's mean, its ratio to `baseline`'s mean, and its rate.
    pub fn print(&self, baseline: &str) {
        let rows = self.rows.lock().unwrap();
        let mean = |r: &(String, Duration, u64, u64)| r.1.as_secs_f64() / r.2.max(1) as f64;
        let Some(base) = rows.iter().find(|r| r.0 == baseline).map(mean) else {
            return;
        };
        println!(
            "\n{:<44} {:>12} {:>10} {:>14}",
            "operation", "mean", "× floor", "items/s"
        );
        for r in rows.iter() {
            let m = mean(r);
            println!(
                "{:<44} {:>10.3}ms {:>10.2} {:>14.0}",
                r.0,
                m * 1e3,
                m / base,
                r.3 as f64 / m
            );
        }
        println!("(floor: `{baseline}`, measured on the same pool in the same run)\n");
    }

    /// Prints each pair's means and the ratio of the first to the second, against
    /// its goal: `pairs` is (operation, baseline, goal).
    pub fn print_pairs(&self, pairs: &[(&str, &str, f64)]) {
        let rows = self.rows.lock().unwrap();
        let mean = |name: &str| {
            rows.iter()
                .find(|r| r.0 == name)
                .map(|r| (r.1.as_secs_f64() / r.2.max(1) as f64, r.3))
        };
        println!(
            "\n{:<40} {:>10} {:>10} {:>8} {:>6} {:>12}",
            "operation", "mean", "baseline", "ratio", "goal", "items/s"
        );
        for (name, baseline, goal) in pairs {
            let (Some((m, items)), Some((base, _))) = (mean(name), mean(baseline)) else {
                continue;
            };
            let ratio = m / base;
            println!(
                "{:<40} {:>8.3}ms {:>8.3}ms {:>7.2}× {:>5.1}× {:>12.0}{}",
                name,
                m * 1e3,
                base * 1e3,
                ratio,
                goal,
                items as f64 / m,
                if ratio <= *goal {
                    ""
                } else {
                    "  over the goal"
                }
            );
        }
        println!("(baseline: the row named in `pairs`, measured in the same run)\n");
    }
}

/// A database for one benchmark run: on `DATABASE_URL`'s server, or a throwaway one.
pub async fn database() -> String {
    test_postgres::TestDb::new().await.url().to_owned()
}
