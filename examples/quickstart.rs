//! Three jobs declared with `#[job]`, on the embedded SQLite default (a file,
//! `scheduler.db`, in the working directory), printing each run.
//!
//! ```text
//! cargo run --example quickstart                 # until Ctrl-C
//! cargo run --example quickstart -- --seconds 10 # for ten seconds
//! ```
//!
//! Start it twice in one directory: the two processes share the file, and each tick
//! of the cluster jobs runs in only one of them; the node job runs once per tick per
//! `--node` (here both default to the hostname, so they share it too).
//!
//! `--help` lists the flags, and the environment variables that stand in for them.

use std::process::ExitCode;
use std::time::Duration;

use scheduler_core::{BoxError, JobContext, Scheduler, job};
use scheduler_examples::{Node, RunFor, init_logging, parse_args, report};
use scheduler_sqlite::{SqliteOptions, SqliteStore};

/// Three jobs on the embedded SQLite store, printing each run; Ctrl-C stops them
/// gracefully.
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
    #[command(flatten)]
    node: Node,
    #[command(flatten)]
    run_for: RunFor,
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
async fn main() -> ExitCode {
    let args: Args = parse_args();
    init_logging();
    report(run(args).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let path = args.db;
    let store = SqliteStore::open(&path, SqliteOptions::default()).await?;
    let mut builder = Scheduler::builder(store)
        .lease_ttl(Duration::from_secs(10))
        .shutdown_grace(Duration::from_secs(3))
        .job(heartbeat)
        .job(node_report)
        .job(slow_sweep);
    if let Some(node) = args.node.node {
        builder = builder.node_id(node);
    }
    let scheduler = builder.build()?;
    println!(
        "quickstart: 3 jobs on {path} as node {}; Ctrl-C stops gracefully",
        scheduler.node_id()
    );
    scheduler.run_until(args.run_for.shutdown_signal()).await;
    Ok(())
}
