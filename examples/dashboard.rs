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

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use axum::routing::get;
use scheduler_core::{BoxError, JobContext, ScheduleRow, Scheduler, Store as _, job};
use scheduler_examples::{Node, RunFor, init_logging, parse_args, report};
use scheduler_sqlite::{HistoryOptions, RunHistory, SqliteOptions, SqliteStore};
use scheduler_web::{Actions, Actor, Dashboard};
use tokio::net::TcpListener;

/// A few jobs on the embedded SQLite store and their dashboard on
/// http://127.0.0.1:PORT/scheduler; Ctrl-C stops gracefully.
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
    #[command(flatten)]
    node: Node,
    #[command(flatten)]
    run_for: RunFor,
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

/// Listens on `127.0.0.1:port`; a port in use says which flag picks another.
async fn listen(port: u16) -> Result<TcpListener, BoxError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpListener::bind(addr)
        .await
        .map_err(|err| match err.kind() {
            ErrorKind::AddrInUse => {
                format!("port {port} is in use; pass --port N (0 picks a free port)").into()
            }
            _ => format!("cannot listen on {addr}: {err}").into(),
        })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Args = parse_args();
    init_logging();
    report(run(args).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let listener = listen(args.port).await?;
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
    if let Some(node) = args.node.node {
        builder = builder.node_id(node);
    }
    let scheduler = builder.build()?;

    // A dynamic schedule, as an app (or an operator, on the page) adds one.
    if let Some(controls) = store.controls() {
        controls
            .register_handlers(scheduler.node_id(), &["tenant_report".to_owned()])
            .await?;
        if !controls
            .schedules()
            .await?
            .iter()
            .any(|r| r.name == "tenant-42-report")
        {
            let mut row = ScheduleRow::new("tenant-42-report", "tenant_report", "every 30s");
            row.args = r#"{"tenant": 42}"#.to_owned();
            controls
                .put_schedule(&row, "example", "the example's own schedule")
                .await?;
        }
    }

    let actions = if args.read_only {
        Actions::disabled()
    } else {
        Actions::enabled()
    };
    let dashboard = Dashboard::new(store)
        .jobs(scheduler.jobs())
        .node(scheduler.node_id())
        .actions(actions);
    let app = Router::new()
        .route("/", get(|| async { Redirect::to("/scheduler") }))
        .nest(
            "/scheduler",
            dashboard.router().layer(middleware::from_fn(operator)),
        );
    let addr = listener.local_addr()?;
    println!("dashboard on http://{addr}/scheduler");
    println!(
        "{} jobs and a dynamic schedule on {} as node {}, {}; Ctrl-C stops gracefully",
        scheduler.jobs().len(),
        args.db,
        scheduler.node_id(),
        if args.read_only {
            "read-only"
        } else {
            "actions enabled"
        },
    );

    let (stopped_tx, stopped_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(async move {
        let mut stopped = stopped_rx;
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    scheduler.run_until(args.run_for.shutdown_signal()).await;
    let _ = stopped_tx.send(true);
    server.await??;
    Ok(())
}
