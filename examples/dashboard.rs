//! The operators' dashboard (`scheduler-web`) over a few jobs on the embedded SQLite
//! default (a file, `dashboard.db`, in the working directory; `--db PATH` to choose
//! another), with the run history on and the actions enabled.
//!
//! ```text
//! cargo run --example dashboard                 # http://127.0.0.1:8080/scheduler, until Ctrl-C
//! cargo run --example dashboard -- --port 0     # a free port: the first line says which
//! cargo run --example dashboard -- --read-only  # the dashboard without its actions
//! ```
//!
//! The jobs: `heartbeat` every second; `flaky` every five seconds, failing every
//! other tick; `slow-report` every ten seconds, taking three; `uptime-check` every
//! fifteen seconds once per node; `nightly-digest` at 02:30 in Berlin, which needs
//! fencing (trigger it from the page to see it run); and the dynamic schedule
//! `tenant-42-report`, a row bound to the `tenant_report` handler, every thirty
//! seconds. Pause, resume and trigger them from the page, or add schedules of your
//! own for `tenant_report`.
//!
//! The app's authentication would wrap the dashboard's router; here a layer only
//! names the operator (`web:local`), as an auth layer does once it knows who is
//! asking, so the controls applied are recorded with that name.
//!
//! `--help` lists the flags, and the environment variables that stand in for them.

use std::env;
use std::future::IntoFuture as _;
use std::io::{ErrorKind, IsTerminal as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use clap::{CommandFactory as _, FromArgMatches as _};
use scheduler_core::{
    BoxError, JobContext, Report, ScheduleRow, Scheduler, Store as _, job, shutdown_signal,
};
use scheduler_sqlite::{HistoryOptions, RunHistory, SqliteOptions, SqliteStore};
use scheduler_web::{Actions, Actor, Dashboard};
use tracing_subscriber::EnvFilter;

/// A few jobs on the embedded SQLite store and their dashboard on
/// http://127.0.0.1:PORT/scheduler; Ctrl-C or SIGTERM stops gracefully.
#[derive(Debug, clap::Parser)]
#[command(name = "dashboard")]
struct Args {
    /// SQLite file, created when missing
    #[arg(
        long,
        value_name = "PATH",
        env = "SCHEDULER_DB",
        default_value = "dashboard.db"
    )]
    db: String,
    /// Port on 127.0.0.1 to serve the dashboard on (0 picks a free one)
    #[arg(long, value_name = "N", env = "DASHBOARD_PORT", default_value_t = 8080)]
    port: u16,
    /// Serve the dashboard without its actions (pause, resume, trigger, schedules)
    #[arg(long)]
    read_only: bool,
    /// Node id for node-scope jobs (default: the hostname)
    #[arg(long, value_name = "NAME", env = "NODE_ID")]
    node: Option<String>,
    /// Stop gracefully after N seconds (default: run until Ctrl-C or SIGTERM)
    #[arg(long, value_name = "N", env = "RUN_SECONDS")]
    seconds: Option<u64>,
}

/// Every second.
#[job(every = "1s")]
async fn heartbeat(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

/// Every five seconds; fails every other tick.
#[job(every = "5s")]
async fn flaky(ctx: JobContext) -> Result<(), BoxError> {
    if ctx.tick().at().timestamp() % 10 == 5 {
        return Err("the upstream said no (HTTP 503)".into());
    }
    Ok(())
}

/// Every ten seconds, taking three.
#[job(every = "10s", name = "slow-report", timeout = "8s")]
async fn slow_report(_ctx: JobContext) -> Result<(), BoxError> {
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok(())
}

/// Every fifteen seconds, once per node.
#[job(every = "15s", name = "uptime-check", scope = "node")]
async fn uptime_check(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

/// At 02:30 in Berlin; a second run would send the digest twice, so it says so.
#[job(
    cron = "0 30 2 * * *",
    tz = "Europe/Berlin",
    name = "nightly-digest",
    catch_up = "1h",
    fencing,
    retry = 2,
    retry_backoff = "30s"
)]
async fn nightly_digest(ctx: JobContext) -> Result<(), BoxError> {
    println!("sent the nightly digest (fencing token {})", ctx.token());
    Ok(())
}

/// What a dynamic schedule bound to `tenant_report` runs: its row's arguments.
async fn tenant_report(_ctx: JobContext, args: Arc<str>) -> Result<(), BoxError> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("tenant report for {args}");
    Ok(())
}

/// Where the app's auth layer would check the session; here it only names the
/// operator the controls are recorded for.
async fn operator(mut req: Request, next: Next) -> Response {
    req.extensions_mut().insert(Actor("web:local".to_owned()));
    next.run(req).await
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

    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| match err.kind() {
            ErrorKind::AddrInUse => format!(
                "port {} is in use; pass --port N (0 picks a free port)",
                args.port
            ),
            _ => format!("cannot listen on {addr}: {err}"),
        })?;
    let store = SqliteStore::open(&args.db, SqliteOptions::default()).await?;
    let history = Arc::new(RunHistory::new(&store, HistoryOptions::default()).await?);
    let mut builder = Scheduler::builder(store.clone())
        .record_runs(history.clone())
        .shutdown_grace(Duration::from_secs(5))
        .job(heartbeat)
        .job(flaky)
        .job(slow_report)
        .job(uptime_check)
        .job(nightly_digest)
        .job(history.retention_job())
        .handler("tenant_report", tenant_report);
    if let Some(node) = args.node {
        builder = builder.node_id(node);
    }
    let scheduler = builder.build()?;

    // A dynamic schedule, as an app (or an operator, on the page) adds one.
    if let Some(controls) = store.controls() {
        controls
            .register_handlers(scheduler.node_id(), &["tenant_report".to_owned()])
            .await?;
        let schedules = controls.schedules().await?;
        if !schedules.iter().any(|r| r.name == "tenant-42-report") {
            let mut row = ScheduleRow::new("tenant-42-report", "tenant_report", "every 30s");
            row.args = r#"{"tenant": 42}"#.to_owned();
            controls
                .put_schedule(&row, "example", "the example's own schedule")
                .await?;
        }
    }

    let (actions, mode) = match args.read_only {
        true => (Actions::disabled(), "read-only"),
        false => (Actions::enabled(), "actions enabled"),
    };
    let dashboard = Dashboard::new(store)
        .jobs(scheduler.jobs())
        .node(scheduler.node_id())
        .actions(actions);
    let redirect = axum::routing::get(|| async { Redirect::to("/scheduler") });
    // `mount`: `/scheduler` and `/scheduler/` both lead to the jobs page.
    let dashboard = dashboard
        .mount("/scheduler")
        .layer(middleware::from_fn(operator));
    let app = axum::Router::new().route("/", redirect).merge(dashboard);
    let addr = listener.local_addr()?;
    println!("dashboard on http://{addr}/scheduler");
    println!(
        "{} jobs and a dynamic schedule on {} as node {}, {mode}; Ctrl-C stops gracefully",
        scheduler.jobs().len(),
        args.db,
        scheduler.node_id(),
    );

    let stopped = scheduler_core::CancellationToken::new();
    let server =
        axum::serve(listener, app).with_graceful_shutdown(stopped.clone().cancelled_owned());
    let server = tokio::spawn(server.into_future());
    // Until Ctrl-C or SIGTERM (a second one stops waiting for running jobs), or --seconds.
    let seconds = args.seconds.map_or(Duration::MAX, Duration::from_secs);
    let stop = async {
        tokio::select! { () = shutdown_signal() => {}, () = tokio::time::sleep(seconds) => {} }
    };
    scheduler.run_until(stop).await;
    stopped.cancel();
    server.await??;
    Ok(())
}
