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

use std::process::ExitCode;
use std::time::Duration;

use scheduler_core::{
    BoxError, JobContext, LeaseName, Scheduler, Store, TakeRequest, Tick, Ttl, job,
};
use scheduler_examples::{Database, RunFor, init_logging, parse_args, report};
use scheduler_postgres::diagnostics::{self, Forgotten};
use scheduler_postgres::{Fence, FencedError, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, Statement};

/// A fenced job paying out once per tick on PostgreSQL, then a stale holder's write
/// being refused.
#[derive(Debug, clap::Parser)]
#[command(name = "fenced_payout")]
struct Args {
    #[command(flatten)]
    database: Database,
    #[command(flatten)]
    run_for: RunFor,
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
async fn main() -> ExitCode {
    let args: Args = parse_args();
    init_logging();
    report(run(args).await)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let url = &args.database.database_url;
    let store = PostgresStore::connect(url, PostgresOptions::default()).await?;
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
    scheduler.run_until(args.run_for.shutdown_signal()).await;

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
