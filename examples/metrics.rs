#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The scheduler's OpenTelemetry metrics, scraped by Prometheus.
//!
//! Three jobs run on the embedded SQLite store (a file, `metrics.db`, in the working
//! directory; `--db PATH` to choose another) with a meter from an `SdkMeterProvider`
//! whose reader is the `opentelemetry-prometheus` exporter. A small HTTP server (a
//! tokio `TcpListener`, no web framework) serves the Prometheus text exposition on
//! `http://127.0.0.1:9464/metrics` (`--port N`; `--port 0` picks a free port, and
//! the first line printed says which). Every run prints one line, `ran JOB tick T`
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder as _, Registry, TextEncoder};
use scheduler_core::{BoxError, JobContext, Scheduler, job};
use scheduler_examples::{flag, init_logging, shutdown_signal};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

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

/// Serves `GET /metrics` from `registry` until the process ends.
async fn serve(listener: TcpListener, registry: Registry) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let registry = registry.clone();
                tokio::spawn(async move {
                    if let Err(err) = respond(stream, &registry).await {
                        tracing::warn!(error = %err, "metrics request failed");
                    }
                });
            }
            Err(err) => {
                tracing::warn!(error = %err, "accepting a metrics connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Answers one HTTP/1.x request and closes the connection.
async fn respond(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    // The request head; a GET has no body.
    let mut head = Vec::new();
    let mut buf = [0_u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() <= 8192 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(head.split(|b| *b == b'\n').next().unwrap_or_default());
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            let encoder = TextEncoder::new();
            let mut body = Vec::new();
            match encoder.encode(&registry.gather(), &mut body) {
                Ok(()) => ("200 OK", encoder.format_type().to_owned(), body),
                Err(err) => (
                    "500 Internal Server Error",
                    "text/plain".to_owned(),
                    format!("encoding the metrics failed: {err}\n").into_bytes(),
                ),
            }
        }
        ("GET", _) => (
            "404 Not Found",
            "text/plain".to_owned(),
            b"try /metrics\n".to_vec(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain".to_owned(),
            b"GET only\n".to_vec(),
        ),
    };
    let header = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    init_logging();
    let path = flag("db", "SCHEDULER_DB").unwrap_or_else(|| "metrics.db".to_owned());
    let port: u16 = match flag("port", "METRICS_PORT") {
        Some(p) => p.parse().map_err(|e| format!("--port {p}: {e}"))?,
        None => 9464,
    };
    let limit = match flag("stop-after-runs", "STOP_AFTER_RUNS") {
        Some(n) => Some(
            n.parse::<u64>()
                .map_err(|e| format!("--stop-after-runs {n}: {e}"))?,
        ),
        None => None,
    };

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

    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
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
    if let Some(node) = flag("node", "NODE_ID") {
        builder = builder.node_id(node);
    }
    let scheduler = builder.build()?;
    println!(
        "metrics: 3 jobs on {path} as node {}; Ctrl-C stops gracefully",
        scheduler.node_id()
    );

    let mut signal = std::pin::pin!(shutdown_signal());
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
