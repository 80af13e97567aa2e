//! The four jobs of the design brief, on PostgreSQL:
//! - an hourly **sweep** deleting expired challenges (cluster);
//! - **alert evaluation** every 30 s (cluster);
//! - **mail security checks** every 15 min, over domains unchecked for 23 h (cluster);
//! - **uptime checks** every 10 s, once per node (node scope).
//!
//! Start it three times, in three terminals, to watch the cluster share the work
//! (two with the same `--node` share the node job; a third node runs its own):
//!
//! ```text
//! cargo run --example uptime_monitor -- --database-url postgres://postgres@127.0.0.1:5432/app --node node-a
//! cargo run --example uptime_monitor -- --database-url postgres://postgres@127.0.0.1:5432/app --node node-a
//! cargo run --example uptime_monitor -- --database-url postgres://postgres@127.0.0.1:5432/app --node node-b
//! ```
//!
//! `DATABASE_URL` and `NODE_ID` work instead of the flags; `--seconds N` stops after N s.
//!
//! Every finished run is recorded in the run history (`scheduler_leases_runs`), so
//! `cargo run -p scheduler-cli -- status` shows each job's last run.

use std::env;
use std::io::IsTerminal as _;
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory as _, FromArgMatches as _};
use scheduler_core::{BoxError, JobContext, Report, Scheduler, job, shutdown_signal};
use scheduler_postgres::{HistoryOptions, PostgresOptions, PostgresStore, RunHistory};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use tracing_subscriber::EnvFilter;

/// Four jobs of an uptime monitor on PostgreSQL; start several to watch them share
/// the work. Ctrl-C or SIGTERM stops an instance gracefully.
#[derive(Debug, clap::Parser)]
#[command(name = "uptime_monitor")]
struct Args {
    /// PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/app
    /// (add ?pgbouncer=true behind PgBouncer's transaction pooling)
    #[arg(long, value_name = "URL", env = "DATABASE_URL")]
    database_url: String,
    /// Node id for node-scope jobs (default: the hostname)
    #[arg(long, value_name = "NAME", env = "NODE_ID")]
    node: Option<String>,
    /// Stop gracefully after N seconds (default: run until Ctrl-C or SIGTERM)
    #[arg(long, value_name = "N", env = "RUN_SECONDS")]
    seconds: Option<u64>,
}

/// Taken before [`SCHEMA`], in its transaction: `CREATE TABLE IF NOT EXISTS` is not
/// safe against itself (two sessions both find the table missing, and the second
/// fails on a unique index of the catalog), so instances starting together create the
/// tables one after the other. The lock ends with the transaction.
const SCHEMA_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('scheduler-examples:uptime_monitor', 0))";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS challenges (id bigserial PRIMARY KEY, expires_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS monitors (id bigserial PRIMARY KEY, url text NOT NULL, down_since timestamptz);
CREATE TABLE IF NOT EXISTS uptime_checks (monitor bigint NOT NULL, node text NOT NULL, tick timestamptz NOT NULL, up boolean NOT NULL, PRIMARY KEY (monitor, node, tick));
CREATE TABLE IF NOT EXISTS alerts (monitor bigint PRIMARY KEY, raised_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS domains (name text PRIMARY KEY, checked_at timestamptz);
INSERT INTO monitors (url) SELECT 'https://example.invalid/' || g FROM generate_series(1, 3) g WHERE NOT EXISTS (SELECT 1 FROM monitors);
INSERT INTO domains (name) VALUES ('example.invalid'), ('example.test') ON CONFLICT DO NOTHING;
";

/// Runs `sql` on the app's pool (given to the scheduler as state); the rows it wrote.
async fn exec(ctx: &JobContext, sql: &str, values: Vec<sea_orm::Value>) -> Result<u64, BoxError> {
    let db = ctx.state::<DatabaseConnection>()?;
    let statement = Statement::from_sql_and_values(DbBackend::Postgres, sql, values);
    Ok(db.execute_raw(statement).await?.rows_affected())
}

/// Deletes what expired. A second run finds nothing left to delete.
#[job(every = "1h")]
async fn sweep(ctx: JobContext) -> Result<(), BoxError> {
    let sql = "DELETE FROM challenges WHERE expires_at < now()";
    let deleted = exec(&ctx, sql, vec![]).await?;
    let (node, tick) = (ctx.node(), ctx.tick());
    println!("[{node}] sweep for {tick}: {deleted} expired challenges deleted");
    Ok(())
}

/// Raises an alert for monitors whose last two checks failed; compares with stored state.
#[job(every = "30s", name = "alert-evaluation")]
async fn alert_evaluation(ctx: JobContext) -> Result<(), BoxError> {
    let raised = exec(
        &ctx,
        "INSERT INTO alerts (monitor, raised_at)
         SELECT m.id, now() FROM monitors m
         WHERE (SELECT count(*) FILTER (WHERE NOT up) FROM (
                  SELECT up FROM uptime_checks c WHERE c.monitor = m.id ORDER BY tick DESC LIMIT 2) last) = 2
         ON CONFLICT (monitor) DO NOTHING",
        vec![],
    )
    .await?;
    let (node, tick) = (ctx.node(), ctx.tick());
    println!("[{node}] alert evaluation for {tick}: {raised} new alerts");
    Ok(())
}

/// Checks the mail security of domains not checked in the last 23 hours.
#[job(cron = "0 */15 * * * *", name = "mail-checks", jitter = "5s")]
async fn mail_checks(ctx: JobContext) -> Result<(), BoxError> {
    let checked = exec(
        &ctx,
        "UPDATE domains SET checked_at = now() WHERE checked_at IS NULL OR checked_at < now() - interval '23 hours'",
        vec![],
    )
    .await?;
    let (node, tick) = (ctx.node(), ctx.tick());
    println!("[{node}] mail checks for {tick}: {checked} domains checked");
    Ok(())
}

/// Checks every monitor once per tick per node; the primary key makes a repeat a no-op.
#[job(every = "10s", scope = "node", name = "uptime-checks")]
async fn uptime_checks(ctx: JobContext) -> Result<(), BoxError> {
    let added = exec(
        &ctx,
        "INSERT INTO uptime_checks (monitor, node, tick, up)
         SELECT id, $1, $2, random() > 0.1 FROM monitors ON CONFLICT DO NOTHING",
        vec![ctx.node().to_owned().into(), ctx.tick().at().into()],
    )
    .await?;
    let (node, tick) = (ctx.node(), ctx.tick());
    println!("[{node}] uptime checks for {tick}: {added} results");
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

    // A pool of two: one is plenty for the leases (they never pin it); the other is
    // for the jobs' own queries and the run history.
    let options = PostgresOptions::default().max_connections(2);
    let store = PostgresStore::connect(&args.database_url, options).await?;
    // The example's tables and sample rows, once however many instances start at once.
    let txn = store.begin().await?;
    txn.execute_unprepared(SCHEMA_LOCK).await?;
    txn.execute_unprepared(SCHEMA).await?;
    txn.commit().await?;
    // One row per finished run, swept after 30 days by the history's own job.
    let history = Arc::new(RunHistory::new(&store, HistoryOptions::default()).await?);
    let mut builder = Scheduler::builder(store.clone())
        .state(store.connection().clone())
        .lease_ttl(Duration::from_secs(60))
        .record_runs(history.clone())
        .job(history.retention_job())
        .job(sweep)
        .job(alert_evaluation)
        .job(mail_checks)
        .job(uptime_checks);
    if let Some(node) = args.node {
        builder = builder.node_id(node);
    }
    let scheduler = builder.build()?;
    println!(
        "node {} running 4 jobs, recording their runs in {}; Ctrl-C stops it gracefully",
        scheduler.node_id(),
        history.table()
    );
    // Until Ctrl-C or SIGTERM (a second one stops waiting for running jobs), or --seconds.
    let seconds = args.seconds.map_or(Duration::MAX, Duration::from_secs);
    let stop = async {
        tokio::select! { () = shutdown_signal() => {}, () = tokio::time::sleep(seconds) => {} }
    };
    scheduler.run_until(stop).await;
    Ok(())
}
