//! A scenario's numbers, printed as one row of a table.

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use chrono::TimeDelta;

use crate::check::Findings;
use crate::error::{Error, Result};

/// One scenario's numbers.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario.
    pub scenario: String,
    /// Ticks expected in the checked range (one run each).
    pub expected: usize,
    /// Runs recorded for them.
    pub recorded: usize,
    /// Surplus runs (a tick run twice counts one).
    pub duplicates: usize,
    /// Ticks that did not run.
    pub misses: usize,
    /// How many of the misses fell in a fault window.
    pub misses_in_window: usize,
    /// The longest time between the starts of consecutive runs of one series.
    pub longest_gap: TimeDelta,
    /// Its bound.
    pub gap_bound: TimeDelta,
    /// From the moment the faulty holder could run again to the record of its
    /// interrupted run's end (cancelled, write refused).
    pub detect: Option<TimeDelta>,
    /// From the fault to the first run of the interrupted job by another instance.
    pub takeover: Option<TimeDelta>,
    /// The scenario's wall time.
    pub wall: Duration,
    /// How many violations the checks found.
    pub violations: usize,
}

impl Report {
    /// `findings`' numbers for `scenario`; detect and takeover times unset.
    pub fn new(scenario: &str, findings: &Findings, gap_bound: TimeDelta, wall: Duration) -> Self {
        Self {
            scenario: scenario.to_owned(),
            expected: findings.expected,
            recorded: findings.recorded,
            duplicates: findings.duplicates,
            misses: findings.misses,
            misses_in_window: findings.misses_in_window,
            longest_gap: findings.longest_gap,
            gap_bound,
            detect: None,
            takeover: None,
            wall,
            violations: findings.violations.len(),
        }
    }

    /// The table's header, to go above [`row`](Self::row)s.
    pub fn header() -> String {
        format!(
            "{:<22} {:>8} {:>8} {:>4} {:>12} {:>16} {:>7} {:>8} {:>6} {}",
            "scenario",
            "expected",
            "recorded",
            "dups",
            "misses (win)",
            "gap (bound) s",
            "detect",
            "takeover",
            "wall",
            "verdict"
        )
    }

    /// One row of the table.
    pub fn row(&self) -> String {
        let secs = |d: Option<TimeDelta>| {
            d.map_or_else(|| "-".to_owned(), |d| format!("{:.2}s", seconds(d)))
        };
        format!(
            "{:<22} {:>8} {:>8} {:>4} {:>12} {:>16} {:>7} {:>8} {:>5.0}s {}",
            self.scenario,
            self.expected,
            self.recorded,
            self.duplicates,
            format!("{} ({})", self.misses, self.misses_in_window),
            format!(
                "{:.2} ({:.2})",
                seconds(self.longest_gap),
                seconds(self.gap_bound)
            ),
            secs(self.detect),
            secs(self.takeover),
            self.wall.as_secs_f64(),
            match self.violations {
                0 => "ok".to_owned(),
                n => format!("{n} VIOLATIONS"),
            }
        )
    }

    /// Appends the row to `path` (with the header first if the file is new).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be written.
    pub fn append_to(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(Error::io(format!("open {}", path.display())))?;
        let fresh = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
        let text = if fresh {
            format!("{}\n{}\n", Self::header(), self.row())
        } else {
            format!("{}\n", self.row())
        };
        file.write_all(text.as_bytes())
            .map_err(Error::io(format!("write {}", path.display())))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n{}", Self::header(), self.row())
    }
}

fn seconds(d: TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}
