//! A job whose duplicate run would do harm (paying out twice), declared with
//! `fencing`: the runtime hands it the lease's fencing token, cancels it if the lease
//! is lost, and its write goes through a fenced transaction that refuses a stale token.
//!
//! ```text
//! cargo run --example fenced_payout -- --database-url postgres://postgres@127.0.0.1:5432/app --seconds 12
//! ```
//!
//! At the end it plays a stale holder: it takes the lease over from another "instance"
//! and shows the old token's write being refused; then it ends that demo lease
//! (`diagnostics::forget_lease`), whose row stays for its fencing token.

use std::env;
use std::io::IsTerminal as _;
use std::time::Duration;

use clap::{CommandFactory as _, FromArgMatches as _};
use scheduler_core::{
    BoxError, JobContext, LeaseName, Report, Scheduler, Store, TakeRequest, Tick, Ttl, job,
    shutdown_signal,
};
use scheduler_postgres::diagnostics::{self, Forgotten};
use scheduler_postgres::{Fence, FencedError, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tracing_subscriber::EnvFilter;

/// A fenced job paying out once per tick on PostgreSQL, then a stale holder's write
/// being refused.
#[derive(Debug, clap::Parser)]
#[command(name = "fenced_payout")]
struct Args {
    /// PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/app
    /// (add ?pgbouncer=true behind PgBouncer's transaction pooling)
    #[arg(long, value_name = "URL", env = "DATABASE_URL")]
    database_url: String,
    /// Stop gracefully after N seconds (default: run until Ctrl-C or SIGTERM)
    #[arg(long, value_name = "N", env = "RUN_SECONDS")]
    seconds: Option<u64>,
}

/// Pays out what is owed for one tick, once.
#[job(every = "5s", fencing, state(PostgresStore))]
async fn payout(ctx: JobContext) -> Result<(), BoxError> {
    let store = ctx.state::<PostgresStore>()?;
    let fence = Fence::from(&ctx);
    let tick = ctx.tick().at();
    let token = ctx.token().get();
    // Long work would watch `ctx.cancellation()`: it fires when the lease is lost.
    let paid = store
        .fenced(&fence, |txn| {
            Box::pin(async move {
                txn.execute_raw(Statement::from_sql_and_values(
                    DbBackend::Postgres,
                    "INSERT INTO payouts (tick, token, amount) VALUES ($1, $2, 100)",
                    [tick.into(), token.into()],
                ))
                .await
            })
        })
        .await;
    match paid {
        Ok(_) => println!(
            "paid out for tick {} with fencing token {token}",
            ctx.tick()
        ),
        // What a stale holder sees: its lease was taken over (it was paused, or cut off
        // from the database, for longer than the ttl). Nothing was written.
        Err(FencedError::LeaseLost { name, token }) => {
            println!("refused: lease {name} moved on past token {token}; nothing written")
        }
        Err(other) => return Err(other.into()),
    }
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

    let store = PostgresStore::connect(&args.database_url, PostgresOptions::default()).await?;
    store
        .connection()
        .execute_unprepared("CREATE TABLE IF NOT EXISTS payouts (tick timestamptz PRIMARY KEY, token bigint NOT NULL, amount bigint NOT NULL)")
        .await?;
    let scheduler = Scheduler::builder(store.clone())
        .state(store.clone())
        .job(payout)
        .build()?;
    for d in scheduler.declarations() {
        println!(
            "declared: job {} needs fencing (lease {}, {})",
            d.job, d.lease, d.schedule
        );
    }
    // Until Ctrl-C or SIGTERM (a second one stops waiting for running jobs), or --seconds.
    let seconds = args.seconds.map_or(Duration::MAX, Duration::from_secs);
    let stop = async {
        tokio::select! { () = shutdown_signal() => {}, () = tokio::time::sleep(seconds) => {} }
    };
    scheduler.run_until(stop).await;

    // Play a stale holder: take the lease (token n), let another instance take it over
    // (token n+1), then try to write with token n.
    let name = LeaseName::new("stale-demo")?;
    let ttl = Ttl::new(Duration::from_millis(200))?;
    let tick = Tick::new(store.now().await?);
    let old = store
        .take(&[TakeRequest::new(name.clone(), tick)], ttl)
        .await?
        .won
        .pop()
        .ok_or("lease held")?;
    tokio::time::sleep(Duration::from_millis(300)).await; // the old holder "pauses" past its ttl
    let new = store
        .take(&[TakeRequest::new(name.clone(), tick)], ttl)
        .await?
        .won
        .pop()
        .ok_or("not taken over")?;
    let stale = store
        .fenced(
            &Fence {
                name: old.name.clone(),
                holder: old.holder.clone(),
                token: old.token,
            },
            |txn| Box::pin(async move { txn.execute_unprepared("SELECT 1").await }),
        )
        .await;
    println!(
        "stale holder with token {} after a takeover (token {}): {}",
        old.token,
        new.token,
        match stale {
            Err(e) => e.to_string(),
            Ok(_) => "written (this must not happen)".to_owned(),
        }
    );

    // The demo's lease is no job's, and its holder is gone with the demo: end its
    // claim rather than leave it to expire. The row stays, with its fencing token,
    // so the name's tokens keep growing if it is ever taken again.
    match diagnostics::forget_lease(&store, store.table(), name.as_str(), true).await? {
        Some(Forgotten::Ended { token, .. } | Forgotten::NotHeld { token, .. }) => {
            println!("demo lease {name} ended (token {token}): nobody holds it")
        }
        other => return Err(format!("demo lease {name} not ended: {other:?}").into()),
    }
    Ok(())
}
