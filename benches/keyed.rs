//! Idempotent keyed ingestion against a real PostgreSQL server: a stream of events
//! with UUID-like ids, 10% of them redeliveries of a recent event (often to another
//! writer), in batches of 100, by 1, 4 and 16 concurrent writers, three ways:
//!
//! - `keyed`: [`Keyed::process`]: one transaction per batch that takes the batch's
//!   advisory locks in hash order, then `INSERT … ON CONFLICT (id) DO NOTHING`;
//! - `plain`: the same `INSERT … ON CONFLICT (id) DO NOTHING` alone, one autocommit
//!   statement on the unique column (the baseline); its rows sorted by id, without
//!   which concurrent batches with shared ids deadlock;
//! - `for update`: a transaction that first locks the batch's existing rows with
//!   `SELECT … FOR UPDATE` (the pre-check cannot lock the missing ones, so the insert
//!   still needs `ON CONFLICT`), then inserts.
//!
//! Reports events per second and the mean and p99 latency of a batch, and, per 100,000
//! events, the WAL written (`pg_current_wal_lsn()` before and after, over the whole
//! configuration) and the dead tuples left (`n_dead_tup`; each configuration writes a
//! table of its own, seeded with 20,000 rows and analyzed, with autovacuum off). A summary table is printed at the end.
//!
//! `cargo bench -p scheduler-benches --bench keyed`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use scheduler_benches::database;
use scheduler_postgres::{Keyed, KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};

const BATCH: usize = 100;
const WRITERS: [usize; 3] = [1, 4, 16];
/// Rows already in each table, analyzed, before it is measured. (A fresh table that
/// was never analyzed, autovacuum being off, let the `FOR UPDATE` pre-check keep a
/// cached generic plan with a sequential scan: 35 ms per batch at 1 writer.)
const SEED_ROWS: usize = 20_000;
/// One event in ten is a redelivery of one of the last `REDELIVERY_WINDOW` events.
const REDELIVERY_WINDOW: u64 = 400;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Keyed,
    Plain,
    ForUpdate,
}

impl Strategy {
    const ALL: [Strategy; 3] = [Strategy::Keyed, Strategy::Plain, Strategy::ForUpdate];

    fn name(self) -> &'static str {
        match self {
            Strategy::Keyed => "keyed (advisory locks + ON CONFLICT)",
            Strategy::Plain => "plain ON CONFLICT DO NOTHING",
            Strategy::ForUpdate => "SELECT FOR UPDATE pre-check",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Strategy::Keyed => "keyed",
            Strategy::Plain => "plain",
            Strategy::ForUpdate => "for_update",
        }
    }
}

/// What one configuration measured, summed over criterion's calls (warm-up included).
#[derive(Default)]
struct Measured {
    events: u64,
    elapsed: Duration,
    batches: Vec<Duration>,
    wal_bytes: u64,
    dead_tuples: u64,
    rows: u64,
}

struct Row {
    strategy: Strategy,
    writers: usize,
    measured: Measured,
}

static ROWS: Mutex<Vec<Row>> = Mutex::new(Vec::new());

/// A stable 64-bit mix (splitmix64).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The UUID-like id of event number `n`.
fn event_id(n: u64) -> String {
    let (a, b) = (mix(n), mix(n ^ 0x5555_5555_5555_5555));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) & 0x3fff | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// The ids of the batch that starts at event number `first`: one in ten a redelivery
/// of a recent event.
fn batch(first: u64) -> Vec<String> {
    (first..first + BATCH as u64)
        .map(|n| {
            let r = mix(n.wrapping_mul(31));
            if r.is_multiple_of(10) && n > REDELIVERY_WINDOW {
                event_id(n - 1 - (r >> 8) % REDELIVERY_WINDOW)
            } else {
                event_id(n)
            }
        })
        .collect()
}

fn statement(sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// The insert of all three strategies. Its rows are sorted by id: concurrent batched
/// inserts of overlapping ids in different orders deadlock (a speculative insert waits
/// for the transaction that inserted the same id first), as the first run of this
/// benchmark found with plain `ON CONFLICT` and 4 writers.
fn insert_sql(table: &str) -> String {
    format!(
        "INSERT INTO {table} (id, payload) SELECT k, 'event payload, about forty bytes long' \
         FROM unnest($1::text[]) AS k ORDER BY k ON CONFLICT (id) DO NOTHING"
    )
}

async fn write(
    strategy: Strategy,
    conn: &DatabaseConnection,
    keyed: &Keyed,
    table: &str,
    ids: Vec<String>,
) -> Result<(), String> {
    let insert = insert_sql(table);
    match strategy {
        Strategy::Plain => {
            conn.execute_raw(statement(&insert, vec![ids.into()]))
                .await
                .map_err(|e| e.to_string())?;
        }
        Strategy::Keyed => {
            keyed
                .process(&ids, |txn, chunk| {
                    let ids = chunk.to_vec();
                    let insert = insert.clone();
                    Box::pin(async move {
                        txn.execute_raw(statement(&insert, vec![ids.into()]))
                            .await?;
                        Ok::<_, DbErr>(())
                    })
                })
                .await
                .map_err(|e| e.to_string())?;
        }
        Strategy::ForUpdate => {
            use sea_orm::TransactionTrait;
            let txn = conn.begin().await.map_err(|e| e.to_string())?;
            txn.query_all_raw(statement(
                &format!(
                    "SELECT id FROM {table} WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE"
                ),
                vec![ids.clone().into()],
            ))
            .await
            .map_err(|e| e.to_string())?;
            txn.execute_raw(statement(&insert, vec![ids.into()]))
                .await
                .map_err(|e| e.to_string())?;
            txn.commit().await.map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

async fn scalar(conn: &DatabaseConnection, sql: &str) -> i64 {
    conn.query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "v")
        .unwrap()
}

struct Bench {
    rt: tokio::runtime::Runtime,
    store: PostgresStore,
    keyed: Keyed,
    next_event: AtomicU64,
}

impl Bench {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let max_writers = WRITERS.iter().copied().max().unwrap_or(1) as u32;
        let store = rt.block_on(async {
            let url = database().await;
            PostgresStore::connect(
                &url,
                PostgresOptions::default().max_connections(max_writers + 1),
            )
            .await
            .unwrap()
        });
        let keyed = store.keyed(KeyedOptions::default());
        Self {
            rt,
            store,
            keyed,
            next_event: AtomicU64::new(0),
        }
    }

    /// Runs `iters` batches on each of `writers` concurrent writers; returns the wall
    /// time and each batch's latency.
    async fn run(
        &self,
        strategy: Strategy,
        table: &str,
        writers: usize,
        iters: u64,
    ) -> (Duration, Vec<Duration>) {
        // Batches are handed out round-robin, as a queue would: a redelivered event
        // usually lands on another writer, often while the first delivery is in flight.
        let first = self
            .next_event
            .fetch_add(iters * (writers * BATCH) as u64, Ordering::Relaxed);
        let mut plans: Vec<Vec<Vec<String>>> = vec![Vec::new(); writers];
        for i in 0..iters {
            for (w, plan) in plans.iter_mut().enumerate() {
                plan.push(batch(
                    first + (i * writers as u64 + w as u64) * BATCH as u64,
                ));
            }
        }
        let start = Instant::now();
        let tasks: Vec<_> = plans
            .into_iter()
            .map(|plan| {
                let conn = self.store.connection().clone();
                let keyed = self.keyed.clone();
                let table = table.to_owned();
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(plan.len());
                    for ids in plan {
                        let t = Instant::now();
                        write(strategy, &conn, &keyed, &table, ids).await.unwrap();
                        latencies.push(t.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.unwrap());
        }
        (start.elapsed(), latencies)
    }
}

fn keyed_ingest(c: &mut Criterion) {
    let b = Bench::new();
    let conn = b.store.connection().clone();
    let mut group = c.benchmark_group("keyed");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));

    for writers in WRITERS {
        for strategy in Strategy::ALL {
            let table = format!("events_{}_{writers}", strategy.slug());
            b.rt.block_on(conn.execute_unprepared(&format!(
                "CREATE TABLE {table} (id text PRIMARY KEY, payload text NOT NULL, \
                 received_at timestamptz NOT NULL DEFAULT now()) WITH (autovacuum_enabled = false); \
                 INSERT INTO {table} (id, payload) \
                 SELECT 'seed-' || i, 'seed' FROM generate_series(1, {SEED_ROWS}) AS i; \
                 ANALYZE {table}"
            )))
            .unwrap();
            let wal_start = b.rt.block_on(scalar(
                &conn,
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8 AS v",
            ));
            let measured = Mutex::new(Measured::default());
            group.throughput(Throughput::Elements((writers * BATCH) as u64));
            group.bench_function(format!("{}/{writers}_writers", strategy.slug()), |bench| {
                bench.iter_custom(|iters| {
                    let (elapsed, latencies) =
                        b.rt.block_on(b.run(strategy, &table, writers, iters));
                    let mut m = measured.lock().unwrap();
                    m.events += iters * (writers * BATCH) as u64;
                    m.elapsed += elapsed;
                    m.batches.extend(latencies);
                    elapsed
                })
            });
            let mut measured = measured.into_inner().unwrap();
            b.rt.block_on(async {
                let wal_end = scalar(
                    &conn,
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8 AS v",
                )
                .await;
                measured.wal_bytes = u64::try_from(wal_end - wal_start).unwrap_or(0);
                // Backends flush their table statistics at most once a second.
                tokio::time::sleep(Duration::from_millis(1_100)).await;
                measured.dead_tuples = scalar(
                    &conn,
                    &format!(
                        "SELECT n_dead_tup AS v FROM pg_stat_user_tables WHERE relname = '{table}'"
                    ),
                )
                .await as u64;
                let rows = scalar(&conn, &format!("SELECT count(*) AS v FROM {table}")).await;
                measured.rows = (rows as u64).saturating_sub(SEED_ROWS as u64);
            });
            ROWS.lock().unwrap().push(Row {
                strategy,
                writers,
                measured,
            });
        }
    }
    group.finish();
    print_summary();
}

fn print_summary() {
    let rows = ROWS.lock().unwrap();
    let rate = |m: &Measured| m.events as f64 / m.elapsed.as_secs_f64().max(1e-9);
    let per_100k = |x: u64, m: &Measured| x as f64 * 100_000.0 / m.events.max(1) as f64;
    println!(
        "\n{:<38} {:>7} {:>10} {:>8} {:>9} {:>9} {:>11} {:>10} {:>9}",
        "strategy (batches of 100, 10% dup)",
        "writers",
        "events/s",
        "× plain",
        "mean ms",
        "p99 ms",
        "WAL/100k",
        "dead/100k",
        "dup rate"
    );
    for row in rows.iter().filter(|r| r.measured.events > 0) {
        let m = &row.measured;
        let plain = rows
            .iter()
            .find(|r| r.strategy == Strategy::Plain && r.writers == row.writers)
            .map(|r| rate(&r.measured))
            .unwrap_or(f64::NAN);
        let mut sorted = m.batches.clone();
        sorted.sort();
        let p99 = sorted
            .get((sorted.len() * 99).div_ceil(100).saturating_sub(1))
            .copied()
            .unwrap_or_default();
        let mean = m.batches.iter().sum::<Duration>().as_secs_f64() / m.batches.len().max(1) as f64;
        println!(
            "{:<38} {:>7} {:>10.0} {:>8.2} {:>9.2} {:>9.2} {:>9.1}MB {:>10.0} {:>8.1}%",
            row.strategy.name(),
            row.writers,
            rate(m),
            rate(m) / plain,
            mean * 1e3,
            p99.as_secs_f64() * 1e3,
            per_100k(m.wal_bytes, m) / 1e6,
            per_100k(m.dead_tuples, m),
            100.0 * (1.0 - m.rows as f64 / m.events.max(1) as f64),
        );
    }
    println!(
        "(events/s over all of criterion's runs, warm-up included; × plain: ratio to plain \
         ON CONFLICT with as many writers, measured in the same run; WAL and dead tuples \
         per 100,000 events offered, duplicates included; dup rate: share of events that \
         found their id already stored)\n"
    );
}

criterion_group!(benches, keyed_ingest);
criterion_main!(benches);
