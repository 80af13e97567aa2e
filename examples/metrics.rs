#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The scheduler's OpenTelemetry metrics, scraped by Prometheus.
//!
//! Three jobs run on the embedded SQLite store (a file, `metrics.db`, in the working
//! directory; `--db PATH` to choose another) with a meter from an `SdkMeterProvider`
//! whose reader is the `opentelemetry-prometheus` exporter. An axum server serves the
//! Prometheus text exposition on `http://127.0.0.1:9464/metrics` (`GET` and `HEAD`;
//! `--port N`, and `--port 0` picks a free port, and the first line printed says
//! which). Every run prints one line, `ran JOB tick T`
//! or `failed JOB tick T`, so what the metrics say can be checked against it:
//!
//! - `heartbeat`, every second, always succeeds;
//! - `flaky`, every two seconds, fails every other tick;
//! - `slow-report`, every second, takes 1.5 s: every other tick is skipped rather
//!   than overlap (`outcome="skipped_overlap"`).
//!
//! ```text
//! cargo run --example metrics                          # until Ctrl-C
//! curl -s http://127.0.0.1:9464/metrics | grep '^scheduler_'
//! cargo run --example metrics -- --stop-after-runs 10  # stop scheduling after 10 runs,
//!                                                      # keep serving until Ctrl-C
//! cargo run --example metrics -- --seconds 30          # for thirty seconds
//! ```
//!
//! A Prometheus scrape configuration for it (`prometheus.yml`), to use with the
//! dashboard in `dashboards/scheduler.json`:
//!
//! ```yaml
//! scrape_configs:
//!   - job_name: scheduler-example
//!     scrape_interval: 5s
//!     static_configs:
//!       - targets: ["127.0.0.1:9464"]
//! ```
//!
//! The scheduler's job is the `job_name` label (OpenTelemetry attribute `job.name`),
//! so it never clashes with the `job` label Prometheus gives every target.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder as _, Registry, TextEncoder};
use scheduler_core::{BoxError, JobContext, Scheduler, job};
use scheduler_examples::{Node, RunFor, init_logging, parse_args, report};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// The Prometheus text exposition format, version 0.0.4, which is UTF-8.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Three jobs on the embedded SQLite store, their metrics served for Prometheus on
/// http://127.0.0.1:PORT/metrics; Ctrl-C stops gracefully.
#[derive(Debug, clap::Parser)]
#[command(name = "metrics")]
struct Args {
    /// SQLite file, created when missing
    #[arg(
        long,
        value_name = "PATH",
        env = "SCHEDULER_DB",
        default_value = "metrics.db"
    )]
    db: String,
    /// Port on 127.0.0.1 to serve /metrics on (0 picks a free one)
    #[arg(long, value_name = "N", env = "METRICS_PORT", default_value_t = 9464)]
    port: u16,
    /// Stop scheduling after N runs, and keep serving the metrics until Ctrl-C
    #[arg(long, value_name = "N", env = "STOP_AFTER_RUNS")]
    stop_after_runs: Option<u64>,
    #[command(flatten)]
    node: Node,
    #[command(flatten)]
    run_for: RunFor,
}

/// Counts runs, and says when `--stop-after-runs` is reached.
#[derive(Debug)]
struct Runs {
    count: AtomicU64,
    limit: Option<u64>,
    reached: Notify,
}

impl Runs {
    fn one_more(&self) {
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        if Some(n) == self.limit {
            // `notify_one` keeps the permit if nobody waits yet.
            self.reached.notify_one();
        }
    }

    async fn reached(&self) {
        if self.limit.is_some() {
            self.reached.notified().await;
        } else {
            std::future::pending::<()>().await;
        }
    }
}

fn count_run(ctx: &JobContext) {
    if let Ok(runs) = ctx.state::<std::sync::Arc<Runs>>() {
        runs.one_more();
    }
}

/// Every second, once in the cluster.
#[job(every = "1s")]
async fn heartbeat(ctx: JobContext) -> Result<(), BoxError> {
    println!("ran heartbeat tick {}", ctx.tick());
    count_run(&ctx);
    Ok(())
}

/// Every two seconds; fails on every other tick.
#[job(every = "2s")]
async fn flaky(ctx: JobContext) -> Result<(), BoxError> {
    if ctx.tick().at().timestamp() % 4 == 2 {
        println!("failed flaky tick {}", ctx.tick());
        count_run(&ctx);
        return Err("the upstream said no".into());
    }
    println!("ran flaky tick {}", ctx.tick());
    count_run(&ctx);
    Ok(())
}

/// Every second, but takes 1.5 s: the tick that comes while it runs is skipped.
#[job(every = "1s", name = "slow-report")]
async fn slow_report(ctx: JobContext) -> Result<(), BoxError> {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    println!("ran slow-report tick {}", ctx.tick());
    count_run(&ctx);
    Ok(())
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

/// Serves `GET /metrics` (and `HEAD`) from `registry` until the process ends.
async fn serve(listener: TcpListener, registry: Registry) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, "try /metrics\n") })
        .with_state(registry);
    if let Err(err) = axum::serve(listener, app).await {
        tracing::error!(error = %err, "the metrics server stopped");
    }
}

/// The registry's metrics in the Prometheus text format.
async fn metrics(State(registry): State<Registry>) -> Response {
    let mut body = Vec::new();
    match TextEncoder::new().encode(&registry.gather(), &mut body) {
        Ok(()) => ([(header::CONTENT_TYPE, EXPOSITION)], body).into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the metrics failed: {err}\n"),
        )
            .into_response(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Args = parse_args();
    init_logging();
    report(run(args).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let path = args.db;
    let limit = args.stop_after_runs;

    // The app owns the meter provider; the scheduler only gets a meter from it.
    let registry = Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()?;
    let provider = SdkMeterProvider::builder()
        .with_reader(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name("scheduler-metrics-example")
                .build(),
        )
        .build();

    let listener = listen(args.port).await?;
    println!(
        "serving metrics on http://{}/metrics",
        listener.local_addr()?
    );
    tokio::spawn(serve(listener, registry));
    let runs = std::sync::Arc::new(Runs {
        count: AtomicU64::new(0),
        limit,
        reached: Notify::new(),
    });
    let store = SqliteStore::open(&path, SqliteOptions::default()).await?;
    let mut builder = Scheduler::builder(store)
        .lease_ttl(Duration::from_secs(10))
        .shutdown_grace(Duration::from_secs(3))
        .meter(provider.meter("scheduler"))
        .state(runs.clone())
        .job(heartbeat)
        .job(flaky)
        .job(slow_report);
    if let Some(node) = args.node.node {
        builder = builder.node_id(node);
    }
    let scheduler = builder.build()?;
    println!(
        "metrics: 3 jobs on {path} as node {}; Ctrl-C stops gracefully",
        scheduler.node_id()
    );

    let mut signal = std::pin::pin!(args.run_for.shutdown_signal());
    let mut signalled = false;
    scheduler
        .run_until(async {
            tokio::select! {
                () = &mut signal => signalled = true,
                () = runs.reached() => {}
            }
        })
        .await;
    if !signalled {
        // Every run has ended and been recorded: the metrics no longer change.
        println!(
            "stopped scheduling after {} runs; still serving metrics until Ctrl-C",
            runs.count.load(Ordering::SeqCst)
        );
        signal.await;
    }
    provider.shutdown()?;
    Ok(())
}
