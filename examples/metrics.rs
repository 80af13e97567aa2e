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
//!
//! Versions that work together (the scheduler's meter is `opentelemetry` 0.33's):
//!
//! ```toml
//! opentelemetry = { version = "0.33", default-features = false, features = ["metrics"] }
//! opentelemetry_sdk = { version = "0.33", default-features = false, features = ["metrics"] }
//! opentelemetry-prometheus = "0.33"
//! prometheus = { version = "0.14", default-features = false }
//! ```

use std::env;
use std::io::{ErrorKind, IsTerminal as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use clap::{CommandFactory as _, FromArgMatches as _};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::{Resource, metrics::SdkMeterProvider};
use prometheus::{Registry, TextEncoder};
use scheduler_core::{BoxError, JobContext, Report, Scheduler, job, shutdown_signal};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use tokio::sync::Notify;
use tracing_subscriber::EnvFilter;

/// Three jobs on the embedded SQLite store, their metrics served for Prometheus on
/// http://127.0.0.1:PORT/metrics; Ctrl-C or SIGTERM stops gracefully.
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
    /// Node id for node-scope jobs (default: the hostname)
    #[arg(long, value_name = "NAME", env = "NODE_ID")]
    node: Option<String>,
    /// Stop gracefully after N seconds (default: run until Ctrl-C or SIGTERM)
    #[arg(long, value_name = "N", env = "RUN_SECONDS")]
    seconds: Option<u64>,
}

/// Counts runs, and says when `--stop-after-runs` is reached.
#[derive(Debug, Default)]
struct Runs {
    count: AtomicU64,
    limit: Option<u64>,
    reached: Notify,
}

/// Counts one run (each job's last line).
fn count_run(ctx: &JobContext) {
    if let Ok(runs) = ctx.state::<Arc<Runs>>() {
        let n = runs.count.fetch_add(1, Ordering::SeqCst) + 1;
        if Some(n) == runs.limit {
            runs.reached.notify_one(); // keeps the permit if nobody waits yet
        }
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
    let fails = ctx.tick().at().timestamp() % 4 == 2;
    let (word, tick) = (if fails { "failed" } else { "ran" }, ctx.tick());
    println!("{word} flaky tick {tick}");
    count_run(&ctx);
    if fails {
        return Err("the upstream said no".into());
    }
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

/// `GET /metrics`: the registry's metrics in the Prometheus text format, 0.0.4.
async fn metrics(State(registry): State<Registry>) -> Result<impl IntoResponse, StatusCode> {
    let text = TextEncoder::new().encode_to_string(&registry.gather());
    let text = text.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    Ok(([(header::CONTENT_TYPE, content_type)], text))
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

    // The app owns the meter provider; the scheduler only gets a meter from it.
    let registry = Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()?;
    let resource = Resource::builder()
        .with_service_name("scheduler-metrics-example")
        .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(exporter)
        .with_resource(resource)
        .build();

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
    let local = listener.local_addr()?;
    println!("serving metrics on http://{local}/metrics");
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, "try /metrics\n") })
        .with_state(registry);
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            eprintln!("the metrics server stopped: {err}");
        }
    });

    let runs = Arc::new(Runs {
        limit: args.stop_after_runs,
        ..Runs::default()
    });
    let store = SqliteStore::open(&args.db, SqliteOptions::default()).await?;
    let mut builder = Scheduler::builder(store)
        .lease_ttl(Duration::from_secs(10))
        .shutdown_grace(Duration::from_secs(3))
        .meter(provider.meter("scheduler"))
        .state(runs.clone())
        .job(heartbeat)
        .job(flaky)
        .job(slow_report);
    if let Some(node) = args.node {
        builder = builder.node_id(node);
    }
    let scheduler = builder.build()?;
    println!(
        "metrics: 3 jobs on {} as node {}; Ctrl-C stops gracefully",
        args.db,
        scheduler.node_id()
    );

    // Until Ctrl-C or SIGTERM (a second one stops waiting for running jobs), or
    // --seconds, or --stop-after-runs (then serving on until Ctrl-C or SIGTERM).
    let seconds = args.seconds.map_or(Duration::MAX, Duration::from_secs);
    let mut stop = std::pin::pin!(async {
        tokio::select! { () = shutdown_signal() => {}, () = tokio::time::sleep(seconds) => {} }
    });
    let mut stopped = false;
    scheduler
        .run_until(async {
            tokio::select! {
                () = &mut stop => stopped = true,
                () = runs.reached.notified(), if runs.limit.is_some() => {}
            }
        })
        .await;
    if !stopped {
        // Every run has ended and been recorded: the metrics no longer change.
        let count = runs.count.load(Ordering::SeqCst);
        println!("stopped scheduling after {count} runs; still serving metrics until Ctrl-C");
        stop.await;
    }
    provider.shutdown()?;
    Ok(())
}
