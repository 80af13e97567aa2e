//! `history`: the controls applied (when, who, what, why) and, when the store keeps
//! a run history, the recent runs; of one job or of all, newest first, paged.

use scheduler_core::{ControlRecord, Controls, Page, RunRow};
use serde::Serialize;

use crate::columns::{Columns, cell, duration, instant, one_line};
use crate::error::Result;
use crate::json;

/// The most records one page shows.
const MAX_LIMIT: i64 = 1000;

/// `history [JOB] [--limit N] [--before ID] [--runs-before ID]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct HistoryArgs {
    /// Only this job's (or dynamic schedule's); default every job.
    pub job: Option<String>,
    /// At most this many controls, and this many runs.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 20,
        value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT)
    )]
    pub limit: u32,
    /// Only controls older than control ID (the next page).
    #[arg(long, value_name = "ID")]
    pub before: Option<i64>,
    /// Only runs older than run ID (the next page of runs).
    #[arg(long, value_name = "ID")]
    pub runs_before: Option<i64>,
}

/// What `history` shows. Serialized as the `--json` output; field names are stable:
/// `job` (`null`: every job), `controls` (`id`, `at`, `job`, `node`, `action`, `by`,
/// `why`, `detail`) and `runs` (`id`, `job`, `tick`, `node`, `token`, `started`,
/// `finished`, `duration_ms`, `outcome`, `error`, `attempt`), newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct History {
    /// The job asked about, or `None`: every job.
    pub job: Option<String>,
    /// The controls applied, newest first.
    #[serde(serialize_with = "json::rows")]
    pub controls: Vec<ControlRecord>,
    /// The runs the run history keeps, newest first (empty without one).
    #[serde(serialize_with = "json::rows")]
    pub runs: Vec<RunRow>,
    /// The page size asked for: a full page says there may be more.
    #[serde(skip)]
    pub limit: u32,
}

/// Reads a page of the controls applied to `args.job` (or to every job) and a page
/// of its runs.
///
/// # Errors
/// [`Error::Control`](crate::Error::Control) if the store fails.
pub async fn history(controls: &dyn Controls, args: &HistoryArgs) -> Result<History> {
    let job = args.job.as_deref();
    let page = |before| Page {
        before,
        limit: args.limit,
    };
    Ok(History {
        job: args.job.clone(),
        controls: controls.control_history(job, page(args.before)).await?,
        runs: controls.runs(job, page(args.runs_before)).await?,
        limit: args.limit,
    })
}

impl History {
    /// The human output: the controls, then the runs, each an aligned table, newest
    /// first, with the flag that shows the next page when this one is full.
    pub fn human(&self) -> String {
        let mut out = String::new();
        let of = match &self.job {
            Some(job) => format!(" to {job}"),
            None => String::new(),
        };
        if self.controls.is_empty() {
            out.push_str(&format!("no controls applied{of}\n"));
        } else {
            let mut t = Columns::new(&["ID", "AT", "JOB", "NODE", "ACTION", "BY", "WHY", "DETAIL"]);
            for r in &self.controls {
                t.push(vec![
                    r.id.to_string(),
                    instant(r.at),
                    r.job.clone(),
                    r.node.clone().unwrap_or_else(|| "-".to_owned()),
                    r.action.to_string(),
                    r.by.clone(),
                    cell(&r.why, 40),
                    cell(&r.detail, 60),
                ]);
            }
            out.push_str(&t.render());
            if let Some(last) = self.full_page(&self.controls, |r| r.id) {
                out.push_str(&format!("older controls: --before {last}\n"));
            }
        }
        out.push('\n');
        if self.runs.is_empty() {
            out.push_str(
                "no runs recorded (runs are kept only when the app keeps a run history)\n",
            );
        } else {
            let mut t = Columns::new(&[
                "RUN", "JOB", "TICK", "NODE", "TOKEN", "STARTED", "TOOK", "OUTCOME", "ATTEMPT",
                "ERROR",
            ]);
            for r in &self.runs {
                t.push(vec![
                    r.id.to_string(),
                    r.job.clone(),
                    instant(r.tick),
                    r.node.clone(),
                    r.token.to_string(),
                    instant(r.started),
                    duration((r.finished - r.started).num_milliseconds()),
                    r.outcome.to_string(),
                    r.attempt.to_string(),
                    r.error
                        .as_deref()
                        .map(|e| one_line(e, 60))
                        .unwrap_or_default(),
                ]);
            }
            out.push_str(&t.render());
            if let Some(last) = self.full_page(&self.runs, |r| r.id) {
                out.push_str(&format!("older runs: --runs-before {last}\n"));
            }
        }
        out
    }

    /// The oldest id of a full page: where the next page starts.
    fn full_page<T>(&self, rows: &[T], id: impl Fn(&T) -> i64) -> Option<i64> {
        let full = rows.len() >= usize::try_from(self.limit).unwrap_or(usize::MAX);
        full.then(|| rows.last().map(id)).flatten()
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`](crate::Error::Json), which these types never cause.
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}
