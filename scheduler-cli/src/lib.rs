//! `scheduler-cli`: the operator's view of a scheduler database, and the one repair.
//!
//! - `scheduler-cli status` lists every lease of the lease table: its holder, tick,
//!   fencing token, when it expires, and the last run of its job (outcome and error)
//!   from the run history table when the app keeps one
//!   ([`scheduler_postgres::RunHistory`]).
//! - `scheduler-cli locks` lists the sessions that hold or wait for advisory locks in
//!   the database, from `pg_locks` joined with `pg_stat_activity`, and flags an `idle`
//!   session holding one: a pooled connection pinned by a session-level lock.
//! - `scheduler-cli forget NAME [--force]` ends the lease `NAME` when its holder is
//!   gone: a lease held (by the database's clock) is refused unless `--force`, with
//!   its holder and expiry. The row is kept, expired, never deleted, so that the
//!   name's fencing tokens keep growing: the next take gets a greater one. Exit code
//!   0 when the lease is no longer held, [`EXIT_HELD`] when refused,
//!   [`EXIT_MISSING`] when there is no lease of that name.
//! - `scheduler-cli next (--cron EXPR [--tz ZONE] | --every PERIOD) [-n N]` shows a
//!   schedule's next N ticks (default 10) in UTC and in its zone, with a note on each
//!   tick right after a change of the zone's offset (daylight saving time): when the
//!   clocks moved, and whether the tick's wall time was skipped (a restricted-hour
//!   job fires at the gap's end) or repeated. Jobs live in the app's code, so the
//!   schedule is given as the job writes it; a bad expression, zone or period exits
//!   with code 2. It reads no database.
//!
//! All take `--json` for output with stable field names. The database comes from
//! `--database-url` or `DATABASE_URL`; the lease table from `--table` (default
//! `scheduler_leases`). Only `forget` writes (one statement, to one lease row); the
//! other commands only read.
//!
//! The statements and their typed rows are `scheduler_postgres::diagnostics`', run
//! through the store like its own (so they work behind PgBouncer's transaction
//! pooling too); this crate parses the command line and renders. The commands are
//! library functions ([`status()`], [`locks()`], [`forget()`], [`next()`]) with renderers
//! ([`Status::human`], [`Status::json`], …), so they can be called without spawning
//! the binary.
//!
//! ```no_run
//! use scheduler_postgres::TableName;
//!
//! # async fn demo() -> scheduler_cli::Result<()> {
//! let store = scheduler_cli::connect("postgres://app@db/app").await?;
//! let status = scheduler_cli::status(&store, &TableName::default()).await?;
//! print!("{}", status.human());
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod backfill;
mod columns;
pub mod error;
pub mod forget;
mod json;
pub mod locks;
pub mod next;
pub mod status;

use std::time::Duration;

use chrono::Utc;
use clap::{Parser, Subcommand};
use scheduler_postgres::{PostgresOptions, PostgresStore, TableName};

pub use backfill::{BackfillArgs, Backfilled, backfill};
pub use error::{Error, Result};
pub use forget::{EXIT_HELD, EXIT_MISSING, Forget, Forgotten, forget};
pub use locks::{AdvisoryLock, Locks, locks};
pub use next::{Next, NextArgs, next};
pub use status::{LastRun, LeaseState, LeaseStatus, Status, status};

/// The command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "scheduler-cli",
    version,
    about = "Who holds which lease, each job's last run, and who holds advisory locks; \
             forget a lease whose holder is gone; preview a schedule's next ticks",
    long_about = None
)]
pub struct Cli {
    /// The database, as postgres://user:password@host:port/database.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub database_url: Option<String>,

    /// The lease table (`table` or `schema.table`); its run history is `<table>_runs`.
    #[arg(long, default_value = TableName::DEFAULT, global = true)]
    pub table: TableName,

    /// Print JSON (stable field names) instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// How long to wait for the server, in seconds.
    #[arg(long, default_value_t = 5, global = true)]
    pub connect_timeout: u64,

    /// What to show.
    #[command(subcommand)]
    pub command: Command,
}

/// What to show, or do.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Every lease: holder, tick, token, expiry, and its job's last run.
    Status,
    /// Sessions holding or waiting for advisory locks; idle holders are flagged.
    Locks,
    /// End a lease whose holder is gone; a held lease is refused unless --force.
    ///
    /// The lease's row is kept (expired, never deleted), so that the name's fencing
    /// tokens keep growing: the next take of the name wins it with a greater token.
    /// A lease expired or released is left as it is.
    ///
    /// Exit status: 0 when the lease is no longer held (forgotten, or it was not);
    /// 3 when refused because it is held; 4 when there is no lease of that name;
    /// 1 on an error.
    Forget {
        /// The lease's name: the job's name, `job:node` for a node job.
        name: String,
        /// Forget the lease even though it is held: its holder's fenced writes are
        /// refused from then on, and the next take wins it. A holder still running
        /// renews it back unless another instance takes it first: use this for a
        /// holder known to be gone.
        #[arg(long)]
        force: bool,
    },
    /// A schedule's next ticks, in UTC and in its zone, DST changes marked.
    ///
    /// Give the schedule as the job writes it: --cron with a seconds field
    /// ("0 30 2 * * *"), read in --tz (an IANA zone, default UTC), or --every
    /// ("15m"). A tick right after a change of the zone's offset says when the
    /// clocks moved, and whether its wall time was skipped (a restricted-hour job
    /// fires at the gap's end) or repeated. Reads no database.
    ///
    /// Exit status: 0; 2 for a bad expression, zone or period.
    Next(NextArgs),
    /// Run every tick of a past range of a job, once across the cluster: this runs
    /// the job's code, so it belongs in the app's own command line
    /// (scheduler_cli::BackfillArgs and scheduler_cli::backfill; see the README).
    /// Here it only says so, and exits 1.
    Backfill(BackfillArgs),
}

/// What a command prints, and how the process ends.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Output {
    /// The text for stdout.
    pub text: String,
    /// The process's exit code: 0, or `forget`'s [`EXIT_HELD`] or [`EXIT_MISSING`].
    pub exit_code: u8,
}

/// Opens a store on `url` with one connection, without running migrations (the CLI
/// never creates or alters a table), waiting at most 5 s for the server. `pgbouncer=true` in the URL says
/// PgBouncer's transaction pooling sits in between.
///
/// # Errors
/// [`Error::Connect`] if the URL does not parse or the server cannot be reached.
pub async fn connect(url: &str) -> Result<PostgresStore> {
    connect_within(url, Duration::from_secs(5)).await
}

async fn connect_within(url: &str, timeout: Duration) -> Result<PostgresStore> {
    let options = PostgresOptions::default()
        .migrate(false)
        // Whatever version the tables are at: the tool only reads (and forget
        // writes columns every version has).
        .check_schema(false)
        .max_connections(1)
        .connect_timeout(timeout);
    Ok(PostgresStore::connect(url, options).await?)
}

/// Runs the command line: connects, runs the command, and renders its output.
///
/// # Errors
/// [`Error::NoUrl`] without a database URL, and whatever the command reports.
pub async fn run(cli: &Cli) -> Result<Output> {
    // `next` reads no database: its schedule is on the command line.
    if let Command::Next(args) = &cli.command {
        return run_next(cli, args);
    }
    if let Command::Backfill(args) = &cli.command {
        return Err(Error::BackfillOutsideApp {
            job: args.job.clone(),
        });
    }
    let url = cli.database_url.as_deref().ok_or(Error::NoUrl)?;
    let store = connect_within(url, Duration::from_secs(cli.connect_timeout.max(1))).await?;
    let mut exit_code = 0;
    let text = match &cli.command {
        Command::Status => {
            let status = status(&store, &cli.table).await?;
            if cli.json {
                status.json()?
            } else {
                status.human()
            }
        }
        Command::Locks => {
            let locks = locks(&store).await?;
            if cli.json {
                locks.json()?
            } else {
                locks.human()
            }
        }
        Command::Forget { name, force } => {
            let forget = forget(&store, &cli.table, name, *force).await?;
            exit_code = forget.exit_code();
            if cli.json {
                forget.json()?
            } else {
                forget.human()
            }
        }
        // Answered above, before connecting.
        Command::Next(args) => run_next(cli, args)?.text,
        Command::Backfill(args) => {
            return Err(Error::BackfillOutsideApp {
                job: args.job.clone(),
            });
        }
    };
    let _ = store.connection().clone().close().await;
    Ok(Output { text, exit_code })
}

/// `next`, from now on this machine's clock.
fn run_next(cli: &Cli, args: &NextArgs) -> Result<Output> {
    let next = next(args, Utc::now());
    let text = if cli.json { next.json()? } else { next.human() };
    Ok(Output { text, exit_code: 0 })
}
