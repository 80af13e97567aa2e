//! `backfill`: every tick of a past range of a job, once across the cluster — run
//! from the app's own command line, since it runs the job's code.
//!
//! This tool has the lease table, not the app's jobs, so its own `backfill` command
//! only explains that. An app mounts [`BackfillArgs`] in its command line (clap) and
//! hands them to [`backfill`] with its scheduler's
//! [`Backfiller`]:
//!
//! ```no_run
//! use clap::Parser;
//! use scheduler_cli::BackfillArgs;
//!
//! #[derive(Parser)]
//! enum AppCommand {
//!     /// Run the app.
//!     Serve,
//!     /// Run every tick of a past range of a job, once across the cluster.
//!     Backfill(BackfillArgs),
//! }
//!
//! # async fn demo(scheduler: scheduler_core::Scheduler) -> Result<(), Box<dyn std::error::Error>> {
//! if let AppCommand::Backfill(args) = AppCommand::parse() {
//!     let done = scheduler_cli::backfill(&scheduler.backfiller(), &args).await?;
//!     print!("{}", done.human());
//! }
//! # Ok(())
//! # }
//! ```

use chrono::{DateTime, Utc};
use scheduler_core::{BackfillOptions, BackfillReport, Backfiller};
use serde::Serialize;

use crate::error::Result;

/// `backfill JOB --from INSTANT --to INSTANT [--concurrency N]`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct BackfillArgs {
    /// The job's name, as the app registers it.
    pub job: String,
    /// The range's first instant, RFC 3339 (`2026-11-01T00:00:00Z`); ticks at it run.
    #[arg(long, value_parser = instant)]
    pub from: DateTime<Utc>,
    /// The range's last instant, RFC 3339; ticks at it run. Not in the future.
    #[arg(long, value_parser = instant)]
    pub to: DateTime<Utc>,
    /// How many ticks this instance runs at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
}

fn instant(text: &str) -> std::result::Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|e| format!("{e}; write an RFC 3339 instant like 2026-11-01T00:00:00Z"))
}

/// What a backfill did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Backfilled {
    /// The job.
    pub job: String,
    /// The range asked for.
    pub from: DateTime<Utc>,
    /// The range asked for.
    pub to: DateTime<Utc>,
    /// The ticks in the range.
    pub ticks: usize,
    /// Ticks run to success by this call.
    pub ran: usize,
    /// Ticks found completed (by an earlier backfill, or another instance).
    pub already_done: usize,
    /// Ticks whose every attempt failed: run the backfill again to retry them.
    pub failed: usize,
}

/// Runs the backfill `args` asks for, on `backfiller`'s scheduler.
///
/// # Errors
/// What [`Backfiller::backfill`] refuses before anything runs (an unknown job, a
/// range in the future or with too many ticks), or the store's error when it stays
/// unreachable; as [`Error::Backfill`](crate::Error::Backfill).
pub async fn backfill(backfiller: &Backfiller, args: &BackfillArgs) -> Result<Backfilled> {
    let options = BackfillOptions::default().concurrency(usize::from(args.concurrency));
    let report: BackfillReport = backfiller
        .backfill(&args.job, args.from, args.to, options)
        .await
        .map_err(crate::Error::Backfill)?;
    Ok(Backfilled {
        job: args.job.clone(),
        from: args.from,
        to: args.to,
        ticks: report.ticks,
        ran: report.ran,
        already_done: report.already_done,
        failed: report.failed,
    })
}

impl Backfilled {
    /// One line for people.
    pub fn human(&self) -> String {
        format!(
            "backfilled {} from {} to {}: {} ticks, {} ran, {} already done, {} failed{}\n",
            self.job,
            self.from.to_rfc3339(),
            self.to.to_rfc3339(),
            self.ticks,
            self.ran,
            self.already_done,
            self.failed,
            if self.failed > 0 {
                " (run it again to retry them)"
            } else {
                ""
            }
        )
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`](crate::Error::Json), which these types never cause.
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }
}
