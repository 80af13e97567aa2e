//! `scheduler-cli`: the operator's view of a scheduler database, and its hands.
//!
//! The database comes from `--database-url` or `DATABASE_URL`: a `sqlite:` URL
//! (`sqlite:///var/lib/app/scheduler.db`, `sqlite://app.db`) or a plain path opens
//! that SQLite file, a `postgres://` URL (naming its database) PostgreSQL; another
//! scheme is refused. The lease table is `--table` (default
//! `scheduler_leases`) on both; the control tables are named after it. The tool
//! never creates or alters a table.
//!
//! Watching:
//! - `scheduler-cli status` lists every lease of the lease table: its holder, tick,
//!   fencing token, when it expires, and the last run of its job (outcome and error)
//!   from the run history table when the app keeps one
//!   ([`scheduler_postgres::RunHistory`]). PostgreSQL only.
//! - `scheduler-cli locks` lists the sessions that hold or wait for advisory locks in
//!   the database, from `pg_locks` joined with `pg_stat_activity`, and flags an `idle`
//!   session holding one: a pooled connection pinned by a session-level lock.
//!   PostgreSQL only.
//! - `scheduler-cli history [JOB] [--limit N] [--before ID] [--runs-before ID]`
//!   shows the controls applied (when, who, what, why), newest first, and the recent
//!   runs when the store keeps a run history.
//! - `scheduler-cli schedules list` shows every dynamic schedule.
//! - `scheduler-cli instances` lists the instances that recorded a heartbeat: node,
//!   version, state (`live`, `stopped` at its shutdown, `expired` after three
//!   intervals without a beat), when it started and was last seen, and the handlers
//!   and jobs its node registered.
//! - `scheduler-cli next (--cron EXPR [--tz ZONE] | --every PERIOD) [-n N]` shows a
//!   schedule's next N ticks (default 10) in UTC and in its zone, with a note on each
//!   tick right after a change of the zone's offset (daylight saving time): when the
//!   clocks moved, and whether the tick's wall time was skipped (a restricted-hour
//!   job fires at the gap's end) or repeated. Jobs live in the app's code, so the
//!   schedule is given as the job writes it. It reads no database.
//!
//! Acting (each control is recorded with `--by WHO`, default `cli:$USER@HOSTNAME`,
//! and `--why TEXT`; every instance honours it, the take itself refusing a paused
//! job):
//! - `scheduler-cli pause JOB [--node N]` stops the job's runs (everywhere, or on one
//!   node): its ticks are counted `paused`. `resume JOB [--node N] [--no-catch-up]`
//!   lets them through again, catching up the ticks paused over as the job's
//!   catch-up policy says, or dropping them.
//! - A job no instance knows (none registered it, no dynamic schedule or lease names
//!   it; for `resume`, no pause of it is in force) is refused by `pause`, `resume`
//!   and `trigger` (exit 4), with the closest known name, unless `--force`.
//! - `scheduler-cli trigger JOB [--node N] [--while-paused] [--wait [--timeout 60s]]`
//!   asks for one extra run, exactly once in the cluster, and prints the trigger's
//!   id; with `--wait` it follows the run until it ends. A paused job (everywhere,
//!   or on `--node`) is triggered only with `--while-paused`, and recorded as such
//!   (`trigger_while_paused`). `trigger-status ID [--wait]` shows where a trigger
//!   stands. A trigger of a job no live instance runs (none
//!   registered it, nor the handler of its dynamic schedule) is stored all the same,
//!   with a warning on stderr: it waits until an instance running the job starts.
//! - `scheduler-cli schedules put NAME --handler H (--cron EXPR [--zone Z] | --every
//!   PERIOD) [--scope cluster|node] [--policy SPEC] [--args JSON] [--disabled]
//!   [--min-period PERIOD]` adds or replaces a dynamic schedule (an `--every` period
//!   under 1 s is refused unless `--min-period` lowers the minimum); `schedules rm
//!   NAME` removes one; `schedules import FILE` puts every row of a file (what
//!   `schedules list --json` prints, or a JSON array of its rows; `-` for standard
//!   input) in one batch, all or none, each row checked first.
//!
//! `--why` and `--by` keep at most 1 KiB each (`--by` not empty), whatever the
//! command: the store refuses more, and records nothing.
//! - `scheduler-cli forget NAME [--force]` ends the lease `NAME` when its holder is
//!   gone: a lease held (by the database's clock) is refused unless `--force`, with
//!   its holder and expiry. The row is kept, expired, never deleted, so that the
//!   name's fencing tokens keep growing: the next take gets a greater one.
//!   PostgreSQL only.
//!
//! All take `--json` for output with stable field names.
//!
//! # Exit status
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | an error: no database, a failed statement, a store that keeps no controls |
//! | 2 | a bad command line ([`EXIT_USAGE`]): a flag, a cron expression, a zone, a period, a policy or JSON arguments that do not check; input past the store's limits (a `--why` or `--by` over 1 KiB, an empty `--by`, an `--every` period below the minimum, a `--zone` with `--every`) |
//! | 3 | `forget`: the lease is held ([`EXIT_HELD`]) |
//! | 4 | no such thing ([`EXIT_MISSING`]): lease (`forget`), dynamic schedule (`schedules rm`), trigger (`trigger-status`), a job no instance knows (`pause`, `resume`, `trigger` without `--force`) |
//! | 5 | the store refused the control ([`EXIT_REFUSED`]): a handler no instance registered, a name it cannot keep, a trigger of a paused job without `--while-paused` |
//! | 6 | `--wait`: the triggered run ended other than well: failed, timed out, cancelled ([`EXIT_RUN_FAILED`]) |
//! | 7 | `--wait`: the triggered run was skipped, its overlap policy refusing it ([`EXIT_SKIPPED`]) |
//! | 8 | `--wait`: the trigger was still pending or running at `--timeout` ([`EXIT_NOT_DONE`]) |
//!
//! The PostgreSQL-only statements and their typed rows are
//! `scheduler_postgres::diagnostics`', the controls are the store's
//! ([`scheduler_core::Controls`]), all run through the store like its own (so they
//! work behind PgBouncer's transaction pooling too); this crate parses the command
//! line and renders. The commands are library functions ([`status()`], [`locks()`],
//! [`forget()`], [`next()`], [`pause()`], [`trigger()`], [`history()`],
//! [`schedules()`], …) with renderers ([`Status::human`], [`Status::json`], …), so
//! they can be called without spawning the binary.
//!
//! ```no_run
//! use std::time::Duration;
//! use scheduler_cli::Database;
//! use scheduler_core::ControlRequest;
//! use scheduler_postgres::TableName;
//!
//! # async fn demo() -> scheduler_cli::Result<()> {
//! let store = scheduler_cli::connect("postgres://app@db/app").await?;
//! let status = scheduler_cli::status(&store, &TableName::default()).await?;
//! print!("{}", status.human());
//!
//! let db = Database::open("sqlite:///var/lib/app/scheduler.db", &TableName::default(), Duration::from_secs(5)).await?;
//! let request = ControlRequest::new("sweep", "ops:alice").why("disk full");
//! let paused = scheduler_cli::pause(db.controls()?, &request).await?;
//! print!("{}", paused.human());
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

pub mod backfill;
mod columns;
pub mod control;
pub mod database;
pub mod error;
pub mod forget;
pub mod history;
pub mod import;
pub mod instances;
mod json;
pub mod known;
pub mod locks;
pub mod next;
pub mod schedules;
pub mod status;
pub mod trigger;

use std::time::Duration;

use chrono::Utc;
use clap::{Parser, Subcommand};
use scheduler_core::ScheduleRow;
use scheduler_postgres::{PostgresOptions, PostgresStore, TableName};

pub use backfill::{BackfillArgs, Backfilled, backfill};
pub use control::{Applied, PauseArgs, ResumeArgs, Who, default_actor, pause, resume};
pub use database::{Database, sqlite_path};
pub use error::{EXIT_REFUSED, EXIT_USAGE, Error, Result};
pub use forget::{EXIT_HELD, EXIT_MISSING, Forget, Forgotten, forget};
pub use history::{History, HistoryArgs, history};
pub use import::{ImportArgs, Imported, import};
pub use instances::{Instances, instances, runs_live};
pub use known::check_job;
pub use locks::{AdvisoryLock, Locks, locks};
pub use next::{Next, NextArgs, next};
pub use schedules::{
    PutArgs, Removed, RmArgs, Schedules, SchedulesCommand, put_schedule, remove_schedule, schedules,
};
pub use status::{LastRun, LeaseState, LeaseStatus, Status, status};
pub use trigger::{
    EXIT_NOT_DONE, EXIT_RUN_FAILED, EXIT_SKIPPED, TriggerArgs, TriggerStatusArgs, Triggered,
    WaitArgs, trigger, trigger_status,
};

/// The command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "scheduler-cli",
    version,
    about = "Who holds which lease, each job's last run, and who holds advisory locks; \
             pause, resume and trigger jobs, and manage dynamic schedules, on PostgreSQL or \
             SQLite; forget a lease whose holder is gone; preview a schedule's next ticks",
    long_about = None
)]
pub struct Cli {
    /// The database: postgres://user:password@host:port/database (a URL naming no
    /// database is refused), or a SQLite file as sqlite:///absolute/path.db,
    /// sqlite://relative/path.db or the file's path.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub database_url: Option<String>,

    /// The lease table (`table` or `schema.table`); its run history is `<table>_runs`,
    /// its control tables `<table>_controls`, `<table>_audit`, ….
    #[arg(long, default_value = TableName::DEFAULT, global = true)]
    pub table: TableName,

    /// Print JSON (stable field names) instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// How long to wait for the server (or SQLite's write lock), in seconds.
    #[arg(long, default_value_t = 5, global = true)]
    pub connect_timeout: u64,

    /// What to show.
    #[command(subcommand)]
    pub command: Command,
}

/// What to show, or do.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Every lease: holder, tick, token, expiry, and its job's last run
    /// (PostgreSQL).
    Status,
    /// Sessions holding or waiting for advisory locks; idle holders are flagged
    /// (PostgreSQL).
    Locks,
    /// Pause a job: every instance's take of its ticks is refused (counted paused).
    ///
    /// Everywhere, or on one node with --node. Pausing a paused job records the
    /// request and changes nothing else.
    Pause(PauseArgs),
    /// Resume a paused job; the ticks paused over are caught up as its catch-up
    /// policy says, or dropped with --no-catch-up.
    Resume(ResumeArgs),
    /// Ask for one extra run of a job, exactly once in the cluster; prints its id.
    ///
    /// An instance running the job claims it within its poll interval, under the
    /// job's lease (its overlap policy holds). With --wait, follows the run until it
    /// ends. Exit status with --wait: 0 when it succeeded; 6 when it failed (or timed
    /// out, or was cancelled); 7 when it was skipped; 8 when it had not ended at
    /// --timeout.
    Trigger(TriggerArgs),
    /// Where a trigger stands (pending, running, done and how); with --wait,
    /// follows it until its run ends. Exit status: as trigger's; 4 for no such
    /// trigger.
    TriggerStatus(TriggerStatusArgs),
    /// The controls applied (when, who, what, why) and the recent runs, newest
    /// first.
    History(HistoryArgs),
    /// The instances that recorded a heartbeat: node, version, live, stopped or
    /// expired, started, last seen, and the handlers and jobs each registered.
    Instances,
    /// Dynamic schedules: jobs defined by rows, bound to handlers the app registered.
    Schedules {
        /// What to do with them.
        #[command(subcommand)]
        command: SchedulesCommand,
    },
    /// End a lease whose holder is gone; a held lease is refused unless --force.
    ///
    /// The lease's row is kept (expired, never deleted), so that the name's fencing
    /// tokens keep growing: the next take of the name wins it with a greater token.
    /// A lease expired or released is left as it is.
    ///
    /// Exit status: 0 when the lease is no longer held (forgotten, or it was not);
    /// 3 when refused because it is held; 4 when there is no lease of that name;
    /// 1 on an error. PostgreSQL only.
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
    /// Give the schedule as the job writes it: --cron, a crontab line or one with
    /// a seconds field first ("30 2 * * *", "0 30 2 * * *"), read in --tz (an IANA zone, default UTC), or --every
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
    /// The process's exit code: 0, or one of the crate's documented codes
    /// (`forget`'s [`EXIT_HELD`], `trigger --wait`'s [`EXIT_RUN_FAILED`], …).
    pub exit_code: u8,
    /// Warnings for stderr (`trigger` of a job no live instance runs).
    pub warnings: Vec<String>,
}

/// Opens a store on `url` with one connection, without running migrations (the CLI
/// never creates or alters a table), waiting at most 5 s for the server. `pgbouncer=true` in the URL says
/// PgBouncer's transaction pooling sits in between.
///
/// # Errors
/// [`Error::Connect`] if the URL does not parse or the server cannot be reached.
pub async fn connect(url: &str) -> Result<PostgresStore> {
    let options = PostgresOptions::default()
        .migrate(false)
        // Whatever version the tables are at: the tool only reads (and forget
        // writes columns every version has).
        .check_schema(false)
        .max_connections(1)
        .connect_timeout(Duration::from_secs(5));
    Ok(PostgresStore::connect(url, options).await?)
}

/// Runs the command line: opens the database, runs the command, and renders its
/// output.
///
/// A control's actor is `--by`, or [`default_actor`] (read from the environment).
///
/// # Errors
/// [`Error::NoUrl`] without a database URL, and whatever the command reports;
/// [`Error::exit_code`] is the process's exit code.
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
    // A schedule that does not check is refused before any database is opened.
    let (rows, min_period) = match &cli.command {
        Command::Schedules {
            command: SchedulesCommand::Put(args),
        } => (vec![args.row()?], args.min_period),
        Command::Schedules {
            command: SchedulesCommand::Import(args),
        } => {
            let (file, text) = import::read(&args.file)?;
            (
                import::rows(&file, &text, args.min_period)?,
                args.min_period,
            )
        }
        _ => (
            Vec::new(),
            scheduler_core::control::DEFAULT_MIN_SCHEDULE_PERIOD,
        ),
    };
    let url = cli.database_url.as_deref().ok_or(Error::NoUrl)?;
    let timeout = Duration::from_secs(cli.connect_timeout.max(1));
    let db = Database::open_with_min_period(url, &cli.table, timeout, min_period).await?;
    let result = run_on(cli, &db, &rows).await;
    db.close().await;
    result
}

/// Runs `cli`'s command on `db`.
async fn run_on(cli: &Cli, db: &Database, rows: &[ScheduleRow]) -> Result<Output> {
    let json = cli.json;
    fn render<T>(
        json: bool,
        value: &T,
        human: impl Fn(&T) -> String,
        as_json: impl Fn(&T) -> Result<String>,
    ) -> Result<String> {
        if json {
            as_json(value)
        } else {
            Ok(human(value))
        }
    }
    let mut exit_code = 0;
    let mut warnings = Vec::new();
    let text = match &cli.command {
        Command::Status => {
            let status = status(db.postgres("status")?, &cli.table).await?;
            render(json, &status, Status::human, Status::json)?
        }
        Command::Locks => {
            let locks = locks(db.postgres("locks")?).await?;
            render(json, &locks, Locks::human, Locks::json)?
        }
        Command::Forget { name, force } => {
            let forget = forget(db.postgres("forget")?, &cli.table, name, *force).await?;
            exit_code = forget.exit_code();
            render(json, &forget, Forget::human, Forget::json)?
        }
        Command::Pause(args) => {
            let controls = db.controls()?;
            if !args.force {
                check_job(controls, &args.job, false).await?;
            }
            let applied = pause(controls, &args.request()).await?;
            render(json, &applied, Applied::human, Applied::json)?
        }
        Command::Resume(args) => {
            let controls = db.controls()?;
            if !args.force {
                check_job(controls, &args.job, true).await?;
            }
            let applied = resume(controls, &args.request(), !args.no_catch_up).await?;
            render(json, &applied, Applied::human, Applied::json)?
        }
        Command::Trigger(args) => {
            let controls = db.controls()?;
            if !args.force {
                check_job(controls, &args.job, false).await?;
            }
            // Best effort: a store that cannot say gives no warning.
            if let Ok(false) = runs_live(controls, &args.job).await {
                warnings.push(format!(
                    "no live instance runs job {:?}: the trigger waits until one that runs it \
                     starts (`scheduler-cli instances` lists them)",
                    args.job
                ));
            }
            let mut triggered = trigger(controls, &args.request()).await?;
            if let Some(wait) = args.wait.timeout() {
                triggered = trigger_status(controls, triggered.trigger.id, Some(wait)).await?;
            }
            exit_code = triggered.exit_code();
            render(json, &triggered, Triggered::human, Triggered::json)?
        }
        Command::TriggerStatus(args) => {
            let id = scheduler_core::TriggerId(args.id);
            let triggered = trigger_status(db.controls()?, id, args.wait.timeout()).await?;
            exit_code = triggered.exit_code();
            render(json, &triggered, Triggered::human, Triggered::json)?
        }
        Command::History(args) => {
            let history = history(db.controls()?, args).await?;
            render(json, &history, History::human, History::json)?
        }
        Command::Instances => {
            let instances = instances(db.store()).await?;
            render(json, &instances, Instances::human, Instances::json)?
        }
        Command::Schedules { command } => match command {
            SchedulesCommand::List => {
                let list = schedules(db.controls()?).await?;
                render(json, &list, Schedules::human, Schedules::json)?
            }
            SchedulesCommand::Put(args) => {
                let row = match rows.first() {
                    Some(row) => row.clone(),
                    None => args.row()?,
                };
                let applied =
                    put_schedule(db.controls()?, &row, &args.who.actor(), &args.who.why).await?;
                render(json, &applied, Applied::human, Applied::json)?
            }
            SchedulesCommand::Import(args) => {
                let imported =
                    import(db.controls()?, rows, &args.who.actor(), &args.who.why).await?;
                render(json, &imported, Imported::human, Imported::json)?
            }
            SchedulesCommand::Rm(args) => {
                let removed =
                    remove_schedule(db.controls()?, &args.name, &args.who.actor(), &args.who.why)
                        .await?;
                exit_code = removed.exit_code();
                render(json, &removed, Removed::human, Removed::json)?
            }
        },
        // Answered before opening the database.
        Command::Next(args) => run_next(cli, args)?.text,
        Command::Backfill(args) => {
            return Err(Error::BackfillOutsideApp {
                job: args.job.clone(),
            });
        }
    };
    Ok(Output {
        text,
        exit_code,
        warnings,
    })
}

/// `next`, from now on this machine's clock.
fn run_next(cli: &Cli, args: &NextArgs) -> Result<Output> {
    let next = next(args, Utc::now());
    let text = if cli.json { next.json()? } else { next.human() };
    Ok(Output {
        text,
        exit_code: 0,
        warnings: Vec::new(),
    })
}
