//! Three jobs declared with `#[job]`, on the embedded SQLite default (a file,
//! `scheduler.db`, in the working directory), printing each run.
//!
//! ```text
//! cargo run --example quickstart                 # until Ctrl-C or SIGTERM
//! cargo run --example quickstart -- --seconds 10 # for ten seconds
//! ```
//!
//! Ctrl-C or SIGTERM (what Docker, systemd and Kubernetes send) stops it gracefully:
//! running jobs get 3 s to finish, then every lease is released; a second Ctrl-C or
//! SIGTERM cancels the running jobs at once.
//!
//! Start it twice in one directory: the two processes share the file, and each tick
//! of the cluster jobs runs in only one of them; the node job runs once per tick per
//! `--node` (here both default to the hostname, so they share it too).
//!
//! `--help` lists the flags, and the environment variables that stand in for them.

use std::env;
use std::io::IsTerminal as _;
use std::time::Duration;

use clap::{CommandFactory as _, FromArgMatches as _};
use scheduler_core::{BoxError, JobContext, Report, Scheduler, job, shutdown_signal};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use tracing_subscriber::EnvFilter;

/// Three jobs on the embedded SQLite store, printing each run; Ctrl-C or SIGTERM
/// stops them gracefully.
#[derive(Debug, clap::Parser)]
#[command(name = "quickstart")]
struct Args {
    /// SQLite file shared by the instances, created when missing
    #[arg(
        long,
        value_name = "PATH",
        env = "SCHEDULER_DB",
        default_value = "scheduler.db"
    )]
    db: String,
    /// Node id for node-scope jobs (default: the hostname)
    #[arg(long, value_name = "NAME", env = "NODE_ID")]
    node: Option<String>,
    /// Stop gracefully after N seconds (default: run until Ctrl-C or SIGTERM)
    #[arg(long, value_name = "N", env = "RUN_SECONDS")]
    seconds: Option<u64>,
}

/// Every two seconds, once in the cluster.
#[job(every = "2s")]
async fn heartbeat(ctx: JobContext) -> Result<(), BoxError> {
    println!(
        "ran heartbeat for tick {} (token {})",
        ctx.tick(),
        ctx.token()
    );
    Ok(())
}

/// Every third second on Berlin's wall clock, once per node, with up to 500 ms jitter.
#[job(
    cron = "*/3 * * * * *",
    tz = "Europe/Berlin",
    scope = "node",
    jitter = "500ms"
)]
async fn node_report(ctx: JobContext) -> Result<(), BoxError> {
    println!("ran node_report on {} for tick {}", ctx.node(), ctx.tick());
    Ok(())
}

/// Every second; takes longer than its period now and then, so ticks get skipped
/// rather than overlap.
#[job(every = "1s", name = "slow-sweep")]
async fn slow_sweep(ctx: JobContext) -> Result<(), BoxError> {
    let slow = ctx.tick().at().timestamp() % 5 == 0;
    if slow {
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    println!(
        "ran slow-sweep for tick {}{}",
        ctx.tick(),
        if slow { " (slowly)" } else { "" }
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Report> {
    // An empty environment variable counts as unset (`NODE_ID= …` runs as the hostname).
    let command = Args::command().mut_args(|arg| match arg.get_env().and_then(env::var_os) {
        Some(value) if value.is_empty() => arg.env(None::<&str>),
        _ => arg,
    });
    let args = Args::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    // Logs on stderr: `info` unless RUST_LOG says otherwise; colours on a terminal only.
    let colour =
        std::io::stderr().is_terminal() && env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();

    let store = SqliteStore::open(&args.db, SqliteOptions::default()).await?;
    let mut builder = Scheduler::builder(store)
        .lease_ttl(Duration::from_secs(10))
        .shutdown_grace(Duration::from_secs(3))
        .job(heartbeat)
        .job(node_report)
        .job(slow_sweep);
    if let Some(node) = args.node {
        builder = builder.node_id(node);
    }
    let scheduler = builder.build()?;
    println!(
        "quickstart: 3 jobs on {} as node {}; Ctrl-C stops gracefully",
        args.db,
        scheduler.node_id()
    );
    // Until Ctrl-C or SIGTERM (a second one stops waiting for running jobs), or --seconds.
    let seconds = args.seconds.map_or(Duration::MAX, Duration::from_secs);
    let stop = async {
        tokio::select! { () = shutdown_signal() => {}, () = tokio::time::sleep(seconds) => {} }
    };
    scheduler.run_until(stop).await;
    Ok(())
}
