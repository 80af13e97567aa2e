//! One instance of the chaos suite's app: the jobs of [`scheduler_chaos::app`] on a
//! PostgreSQL store, every run recorded in the `runs` table, a heartbeat row every
//! `--heartbeat-ms`. Logs go to stderr; `SIGTERM` or `SIGINT` shut it down gracefully.
//!
//! ```text
//! chaos-app --url postgres://postgres@127.0.0.1:5432/app --instance a --node node-a \
//!     --ttl-ms 2000 --period-ms 1000 --clock-offset-ms=-3600000
//! ```

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use chrono::TimeDelta;
use clap::Parser;
use scheduler_chaos::app::{self, JOBS, RecordedJob};
use scheduler_chaos::{Error, Result};
use scheduler_core::{LocalClock, Scheduler};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

/// Exit status when standard input closed under `--exit-with-stdin`.
const ORPHANED: i32 = 70;

#[derive(Debug, Parser)]
#[command(
    name = "chaos-app",
    about = "An app instance of the chaos suite: recorded jobs on a PostgreSQL lease store"
)]
struct Args {
    /// The database (`pgbouncer=true` for PgBouncer in transaction pooling mode).
    #[arg(long, env = "DATABASE_URL")]
    url: String,
    /// Where to record runs and heartbeats, if not in the lease database: a record
    /// that must outlive a failover of the lease database (which can lose what it
    /// acknowledged last) is kept on another server.
    #[arg(long)]
    record_url: Option<String>,
    /// This instance's name, as recorded in `runs` and `heartbeats`.
    #[arg(long)]
    instance: String,
    /// The node id, for the node-scoped job.
    #[arg(long, default_value = "node-a")]
    node: String,
    /// The lease ttl, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    ttl_ms: u64,
    /// Every job's period, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    period_ms: u64,
    /// How far this instance's clock is off, in milliseconds (positive: ahead).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    clock_offset_ms: i64,
    /// How long a graceful shutdown waits for running jobs, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    grace_ms: u64,
    /// The longest backoff between retries of a failed store call, in milliseconds.
    #[arg(long, default_value_t = 500)]
    retry_cap_ms: u64,
    /// The heartbeat period, in milliseconds.
    #[arg(long, default_value_t = 250)]
    heartbeat_ms: u64,
    /// The pool size.
    #[arg(long, default_value_t = 4)]
    pool: u32,
    /// Exit at once (status 70) when standard input closes: the driver that spawned
    /// this process has gone.
    #[arg(long)]
    exit_with_stdin: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args = Args::parse();
    if args.exit_with_stdin {
        watch_stdin();
    }
    watch_stalls();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!(error = %err, "chaos-app failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let period = Duration::from_millis(args.period_ms);
    // A transaction of ours left idle by a pause must not hold lease rows past the
    // ttl: the server ends it after half the ttl.
    let options = PostgresOptions::default()
        .max_connections(args.pool)
        .connect_timeout(Duration::from_secs(2))
        .idle_transaction_timeout(Duration::from_millis(args.ttl_ms / 2));
    let store = PostgresStore::connect(&args.url, options.clone())
        .await
        .map_err(|source| Error::Store { source })?;
    app::prepare(&store).await?;
    let record = match &args.record_url {
        Some(url) => {
            let record = PostgresStore::connect(url, options)
                .await
                .map_err(|source| Error::Store { source })?;
            app::prepare(&record).await?;
            record
        }
        None => store.clone(),
    };
    let mut builder = Scheduler::builder(store.clone())
        .node_id(args.node.clone())
        .lease_ttl(Duration::from_millis(args.ttl_ms))
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .retry_backoff(
            Duration::from_millis(50),
            Duration::from_millis(args.retry_cap_ms),
        )
        .clock(LocalClock::skewed(TimeDelta::milliseconds(
            args.clock_offset_ms,
        )));
    for spec in JOBS {
        builder = builder.job(
            RecordedJob::new(spec, period, &args.instance, store.clone())
                .recording_to(record.clone()),
        );
    }
    let scheduler = builder
        .build()
        .map_err(|source| Error::Scheduler { source })?;
    tokio::spawn(app::heartbeat(
        record,
        args.instance.clone(),
        scheduler.stats(),
        scheduler.health(),
        Duration::from_millis(args.heartbeat_ms),
    ));
    let mut terminate = signal(SignalKind::terminate()).map_err(|source| Error::Io {
        action: "listen for SIGTERM".to_owned(),
        source,
    })?;
    info!(instance = %args.instance, node = %args.node, pid = std::process::id(),
        clock_offset_ms = args.clock_offset_ms, "chaos-app ready");
    scheduler
        .run_until(async move {
            tokio::select! {
                _ = terminate.recv() => info!("SIGTERM: shutting down gracefully"),
                _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down gracefully"),
            }
        })
        .await;
    info!(instance = %args.instance, "chaos-app stopped");
    Ok(())
}

/// Logs a warning whenever the whole process stood still (a `SIGSTOP`, or the
/// machine too loaded to schedule it): a 100 ms sleep of a thread of its own that
/// took more than 500 ms. The log then tells a stall of the process from one of the
/// scheduler.
fn watch_stalls() {
    std::thread::spawn(|| {
        let nap = Duration::from_millis(100);
        loop {
            let began = std::time::Instant::now();
            std::thread::sleep(nap);
            let took = began.elapsed();
            if took > nap * 5 {
                warn!(stalled_ms = took.as_millis(), "the process stood still");
            }
        }
    });
}

/// Exits the process when standard input reaches its end (the driver holds the
/// other end of the pipe; the kernel closes it however the driver ends).
fn watch_stdin() {
    std::thread::spawn(|| {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 256];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        eprintln!("chaos-app: standard input closed; the driver has gone, exiting");
        std::process::exit(ORPHANED);
    });
}
