//! Idempotent keyed ingestion against a real PostgreSQL server: a stream of events
//! with UUID-like ids, 10% of them redeliveries of a recent event (often to another
//! writer, sometimes within one batch), in batches of 100, by 1, 4 and 16 concurrent
//! writers, eight ways:
//!
//! - `plain` (the baseline): a sorted `INSERT … SELECT … ORDER BY id ON CONFLICT (id)
//!   DO NOTHING`, one autocommit statement sent through **plain sqlx** (a `PgPool` of
//!   its own, not the store's, as an app would send it: sqlx tests each connection
//!   handed back to the pool with a round trip of its own). Its rows are sorted:
//!   without that, concurrent batches with shared ids deadlock;
//! - `plain_kept`: the same statement on connections of the writers' own, taken out of
//!   that pool once and never handed back: the insert's physical floor, the baseline of
//!   the `× own` column;
//! - `keyed_insert`: [`Keyed::process`] running that same insert under the batch's
//!   advisory locks ("the same insert under the locks");
//! - `keyed_check`: [`Keyed::process`] running a check-then-insert under the locks: the
//!   ids already stored (`SELECT … WHERE id = ANY($1)`), then a plain `INSERT` (no
//!   `ON CONFLICT`) of the others, which would fail on a duplicate if the locks or the
//!   batch's deduplication let one through;
//! - `for_update`: a sqlx transaction on a pool connection that first locks the batch's
//!   existing rows with `SELECT … FOR UPDATE` (the pre-check cannot lock the missing
//!   ones, so the insert still needs `ON CONFLICT`), then inserts;
//! - `raw_locks`, the floor of the keyed protocol: what `keyed_insert` sends, through
//!   plain sqlx with no ORM and no crate code, on connections of the writers' own as
//!   `plain_kept`'s (`BEGIN`, the same locking statement with the same settings, the
//!   insert, `COMMIT`; the lock ids a 64-bit hash of each key the bench computes, sorted
//!   and distinct). `keyed_insert` over `raw_locks` is the crate's own cost;
//!   `raw_locks` over `plain_kept` is the protocol's;
//! - `raw_merged`: `raw_locks` with `BEGIN` and the locking statement sent as one
//!   simple-protocol query, one round trip less: `BEGIN; EXECUTE keyed_lock(…)`, the
//!   locking statement prepared once per connection (`PREPARE`, so the server does not
//!   plan it every time) and its lock ids spliced in as an integer array literal (the
//!   simple protocol binds nothing): what merging them, as sqlx allows, would gain;
//! - `raw_transaction`: `BEGIN`, the insert, `COMMIT` through plain sqlx on the writers'
//!   own connections, no locks: what the transaction's round trips alone cost.
//!
//! The eight run **in turn**: each of criterion's samples is a round that runs the same
//! number of batches with every strategy (starting with another one each round), so
//! that whatever else loads the machine meanwhile weighs on all of them alike. Reports
//! events per second, its ratio to `plain` with as many writers (the median over the
//! rounds of each round's ratio, measured moments apart on the same server, and the
//! lowest and highest), the mean and p99 latency of a batch, and, per 100,000 events,
//! the WAL written (`pg_current_wal_lsn()` around each strategy's turn) and the dead
//! tuples left (`n_dead_tup`; each strategy writes a table of its own, seeded with
//! 20,000 rows and analyzed, with autovacuum off, and an event stream of its own). A
//! summary table is printed at the end.
//!
//! `cargo bench -p scheduler-benches --bench keyed`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use scheduler_benches::database;
use scheduler_postgres::{Keyed, KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::sqlx::{self, PgConnection, PgPool, postgres::PgPoolOptions};
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
    Plain,
    PlainKept,
    KeyedInsert,
    KeyedCheck,
    ForUpdate,
    RawLocks,
    RawMerged,
    RawTransaction,
}

impl Strategy {
    const ALL: [Strategy; 8] = [
        Strategy::Plain,
        Strategy::PlainKept,
        Strategy::KeyedInsert,
        Strategy::KeyedCheck,
        Strategy::ForUpdate,
        Strategy::RawLocks,
        Strategy::RawMerged,
        Strategy::RawTransaction,
    ];

    fn name(self) -> &'static str {
        match self {
            Strategy::Plain => "plain ON CONFLICT DO NOTHING (sqlx)",
            Strategy::PlainKept => "plain, own connections (sqlx)",
            Strategy::KeyedInsert => "keyed: same insert under the locks",
            Strategy::KeyedCheck => "keyed: check-then-insert",
            Strategy::ForUpdate => "SELECT FOR UPDATE pre-check (sqlx)",
            Strategy::RawLocks => "floor: keyed protocol, raw sqlx",
            Strategy::RawMerged => "floor: BEGIN+locks one trip, raw",
            Strategy::RawTransaction => "BEGIN, insert, COMMIT (raw, no locks)",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Strategy::Plain => "plain",
            Strategy::PlainKept => "plain_kept",
            Strategy::KeyedInsert => "keyed_insert",
            Strategy::KeyedCheck => "keyed_check",
            Strategy::ForUpdate => "for_update",
            Strategy::RawLocks => "raw_locks",
            Strategy::RawMerged => "raw_merged",
            Strategy::RawTransaction => "raw_transaction",
        }
    }
}

/// What one configuration measured, summed over criterion's calls (warm-up included).
#[derive(Default)]
struct Measured {
    events: u64,
    elapsed: Duration,
    /// Each round (criterion call): batches per writer, wall time.
    rounds: Vec<(u64, Duration)>,
    batches: Vec<Duration>,
    wal_bytes: u64,
    dead_tuples: u64,
    rows: u64,
}

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

/// The locking statement `Keyed::process` sends (per-key locks, lock ids computed by
/// the client), with the settings it sends: `$1` the sorted distinct lock ids.
const LOCK_IDS: &str = "SELECT set_config('idle_in_transaction_session_timeout', $2, true) AS idle, \
        set_config('statement_timeout', $3, true) AS bound, count(*) AS locks FROM ( \
       SELECT pg_advisory_xact_lock(s.id) FROM unnest($1::int8[]) AS s(id) ORDER BY s.id \
     ) AS l";

/// `raw_locks`' lock ids: a 64-bit hash (FNV-1a) of each key, sorted and distinct.
/// Not the crate's hash (`hashtextextended`), which only other `raw_locks` writers
/// need to agree with; it costs the client about as little.
fn lock_ids(ids: &[String]) -> Vec<i64> {
    let mut locks: Vec<i64> = ids
        .iter()
        .map(|id| {
            let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            i64::from_ne_bytes(hash.to_ne_bytes())
        })
        .collect();
    locks.sort_unstable();
    locks.dedup();
    locks
}

fn statement(sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// The insert of `plain`, `keyed_insert` and `for_update`. Its rows are sorted by id:
/// concurrent batched inserts of overlapping ids in different orders deadlock (a
/// speculative insert waits for the transaction that inserted the same id first), as
/// the first run of this benchmark found with plain `ON CONFLICT` and 4 writers.
fn insert_sql(table: &str) -> String {
    format!(
        "INSERT INTO {table} (id, payload) SELECT k, 'event payload, about forty bytes long' \
         FROM unnest($1::text[]) AS k ORDER BY k ON CONFLICT (id) DO NOTHING"
    )
}

/// Where each strategy sends its statements.
#[derive(Clone)]
struct Writer {
    /// Plain sqlx, for `plain` and `for_update`.
    pool: PgPool,
    /// The store's keyed handle, for `keyed_*`.
    keyed: Keyed,
    /// Connections taken out of `pool` for good, for `plain_kept` and the `raw_*`
    /// floors: one per writer at most, each used by one batch at a time.
    kept: Arc<Mutex<Vec<PgConnection>>>,
}

impl Writer {
    /// Runs `batch` on a connection of the writer's own ([`Writer::kept`]), which it
    /// keeps afterwards unless the batch failed.
    async fn on_kept<F>(&self, batch: F) -> Result<(), String>
    where
        F: AsyncFnOnce(&mut PgConnection) -> Result<(), sqlx::Error>,
    {
        let kept = self.kept.lock().unwrap().pop();
        let fresh = kept.is_none();
        let mut conn = match kept {
            Some(conn) => conn,
            None => self
                .pool
                .acquire()
                .await
                .map_err(|e| e.to_string())?
                .detach(),
        };
        if fresh {
            // For `raw_merged`.
            let prepare = format!(
                "PREPARE keyed_lock(int8[], text, text) AS {}",
                LOCK_IDS.replace("$1::int8[]", "$1")
            );
            sqlx::Executor::execute(&mut conn, sqlx::AssertSqlSafe(prepare))
                .await
                .map_err(|e| e.to_string())?;
        }
        batch(&mut conn).await.map_err(|e| e.to_string())?;
        self.kept.lock().unwrap().push(conn);
        Ok(())
    }
}

async fn write(
    strategy: Strategy,
    writer: &Writer,
    table: &str,
    ids: Vec<String>,
) -> Result<(), String> {
    let insert = insert_sql(table);
    let sqlx_error = |e: sqlx::Error| e.to_string();
    match strategy {
        Strategy::Plain => {
            sqlx::query(sqlx::AssertSqlSafe(insert))
                .bind(ids)
                .execute(&writer.pool)
                .await
                .map_err(sqlx_error)?;
        }
        Strategy::PlainKept => {
            writer
                .on_kept(async |conn| {
                    sqlx::query(sqlx::AssertSqlSafe(insert))
                        .bind(ids)
                        .execute(conn)
                        .await
                        .map(drop)
                })
                .await?;
        }
        Strategy::KeyedInsert => {
            writer
                .keyed
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
        Strategy::KeyedCheck => {
            let select = format!("SELECT id FROM {table} WHERE id = ANY($1::text[])");
            let insert = format!(
                "INSERT INTO {table} (id, payload) \
                 SELECT k, 'event payload, about forty bytes long' FROM unnest($1::text[]) AS k"
            );
            writer
                .keyed
                .process(&ids, |txn, chunk| {
                    let ids = chunk.to_vec();
                    let (select, insert) = (select.clone(), insert.clone());
                    Box::pin(async move {
                        let stored = txn
                            .query_all_raw(statement(&select, vec![ids.clone().into()]))
                            .await?
                            .iter()
                            .map(|row| row.try_get::<String>("", "id"))
                            .collect::<Result<std::collections::HashSet<_>, DbErr>>()?;
                        let new: Vec<String> =
                            ids.into_iter().filter(|id| !stored.contains(id)).collect();
                        if !new.is_empty() {
                            txn.execute_raw(statement(&insert, vec![new.into()]))
                                .await?;
                        }
                        Ok::<_, DbErr>(())
                    })
                })
                .await
                .map_err(|e| e.to_string())?;
        }
        Strategy::ForUpdate => {
            let lock =
                format!("SELECT id FROM {table} WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE");
            let lock = sqlx::query(sqlx::AssertSqlSafe(lock)).bind(ids.clone());
            let mut conn = writer.pool.acquire().await.map_err(sqlx_error)?;
            in_transaction(&mut conn, "BEGIN", Some(lock), insert, ids)
                .await
                .map_err(sqlx_error)?;
        }
        Strategy::RawLocks => {
            let ids = dedup(ids);
            let lock = sqlx::query(LOCK_IDS)
                .bind(lock_ids(&ids))
                .bind("10s")
                .bind("0");
            writer
                .on_kept(async |conn| in_transaction(conn, "BEGIN", Some(lock), insert, ids).await)
                .await?;
        }
        Strategy::RawMerged => {
            let ids = dedup(ids);
            // `LOCK_IDS`, prepared on the connection, with its parameters as literals
            // (the ids are integers), sent with `BEGIN` as one simple-protocol query.
            let list: Vec<String> = lock_ids(&ids).iter().map(i64::to_string).collect();
            let begin = format!(
                "BEGIN; EXECUTE keyed_lock('{{{}}}', '10s', '0')",
                list.join(",")
            );
            writer
                .on_kept(async |conn| in_transaction(conn, &begin, None, insert, ids).await)
                .await?;
        }
        Strategy::RawTransaction => {
            writer
                .on_kept(async |conn| in_transaction(conn, "BEGIN", None, insert, ids).await)
                .await?;
        }
    }
    Ok(())
}

/// The batch's distinct ids, first occurrences in order (as `Keyed::process` hands
/// them to its work).
fn dedup(ids: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.into_iter()
        .filter(|id| seen.insert(id.clone()))
        .collect()
}

/// A plain sqlx transaction on `conn`: `begin` (one simple-protocol query), `first`
/// (its rows, if any, are not read), the insert of `ids`, `COMMIT`.
async fn in_transaction(
    conn: &mut PgConnection,
    begin: &str,
    first: Option<sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>>,
    insert: String,
    ids: Vec<String>,
) -> Result<(), sqlx::Error> {
    use sqlx::Connection;
    let mut txn = conn
        .begin_with(sqlx::AssertSqlSafe(begin.to_owned()))
        .await?;
    if let Some(first) = first {
        first.execute(&mut *txn).await?;
    }
    sqlx::query(sqlx::AssertSqlSafe(insert))
        .bind(ids)
        .execute(&mut *txn)
        .await?;
    txn.commit().await
}

async fn scalar(conn: &DatabaseConnection, sql: &str) -> i64 {
    conn.query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "v")
        .unwrap()
}

async fn wal_lsn(conn: &DatabaseConnection) -> i64 {
    scalar(
        conn,
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::int8 AS v",
    )
    .await
}

/// One strategy with a number of writers: its table, its own event stream (so that a
/// redelivery refers to an event of the same table), and what it measured.
struct Config {
    strategy: Strategy,
    writers: usize,
    table: String,
    next_event: AtomicU64,
    measured: Mutex<Measured>,
}

struct Bench {
    rt: tokio::runtime::Runtime,
    store: PostgresStore,
    writer: Writer,
}

impl Bench {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let max_writers = WRITERS.iter().copied().max().unwrap_or(1) as u32;
        let (store, pool) = rt.block_on(async {
            let url = database().await;
            let store = PostgresStore::connect(
                &url,
                PostgresOptions::default().max_connections(max_writers + 1),
            )
            .await
            .unwrap();
            // Plain sqlx, with the checkout the store's pool has (ping or not).
            let ping = store
                .connection()
                .get_postgres_connection_pool()
                .options()
                .get_test_before_acquire();
            let pool = PgPoolOptions::new()
                .max_connections(max_writers + 1)
                .test_before_acquire(ping)
                .connect(&url)
                .await
                .unwrap();
            (store, pool)
        });
        let keyed = store.keyed(KeyedOptions::default());
        Self {
            rt,
            store,
            writer: Writer {
                pool,
                keyed,
                kept: Arc::default(),
            },
        }
    }

    /// A table of its own for `strategy` with `writers`, seeded and analyzed.
    fn config(&self, strategy: Strategy, writers: usize) -> Config {
        let table = format!("events_{}_{writers}", strategy.slug());
        self.rt
            .block_on(self.store.connection().execute_unprepared(&format!(
                "CREATE TABLE {table} (id text PRIMARY KEY, payload text NOT NULL, \
                 received_at timestamptz NOT NULL DEFAULT now()) WITH (autovacuum_enabled = false); \
                 INSERT INTO {table} (id, payload) \
                 SELECT 'seed-' || i, 'seed' FROM generate_series(1, {SEED_ROWS}) AS i; \
                 ANALYZE {table}"
            )))
            .unwrap();
        Config {
            strategy,
            writers,
            table,
            next_event: AtomicU64::new(0),
            measured: Mutex::new(Measured::default()),
        }
    }

    /// Runs `iters` batches on each of `config.writers` concurrent writers; returns the
    /// wall time (also recorded, with each batch's latency and the WAL written).
    async fn run(&self, config: &Config, iters: u64) -> Duration {
        let writers = config.writers;
        // Batches are handed out round-robin, as a queue would: a redelivered event
        // usually lands on another writer, often while the first delivery is in flight.
        let first = config
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
        let wal_start = wal_lsn(self.store.connection()).await;
        let start = Instant::now();
        let tasks: Vec<_> = plans
            .into_iter()
            .map(|plan| {
                let writer = self.writer.clone();
                let (strategy, table) = (config.strategy, config.table.clone());
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(plan.len());
                    for ids in plan {
                        let t = Instant::now();
                        write(strategy, &writer, &table, ids).await.unwrap();
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
        let elapsed = start.elapsed();
        let wal_end = wal_lsn(self.store.connection()).await;
        let mut m = config.measured.lock().unwrap();
        m.events += iters * (writers * BATCH) as u64;
        m.elapsed += elapsed;
        m.rounds.push((iters, elapsed));
        m.batches.extend(latencies);
        m.wal_bytes += u64::try_from(wal_end - wal_start).unwrap_or(0);
        elapsed
    }

    /// The dead tuples and new rows of `config`'s table, once it is measured.
    async fn finish(&self, config: &Config) {
        let conn = self.store.connection();
        let table = &config.table;
        let dead = scalar(
            conn,
            &format!("SELECT n_dead_tup AS v FROM pg_stat_user_tables WHERE relname = '{table}'"),
        )
        .await;
        let rows = scalar(conn, &format!("SELECT count(*) AS v FROM {table}")).await;
        let mut m = config.measured.lock().unwrap();
        m.dead_tuples = dead as u64;
        m.rows = (rows as u64).saturating_sub(SEED_ROWS as u64);
    }
}

/// Criterion's samples are rounds: each call runs the same number of batches with
/// every strategy in turn (starting with another one each round), so that whatever
/// else loads the machine meanwhile weighs on all of them alike, and each round gives
/// every strategy a ratio to `plain` measured moments apart.
fn keyed_ingest(c: &mut Criterion) {
    let b = Bench::new();
    let mut group = c.benchmark_group("keyed");
    group
        .sample_size(30)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(15))
        .warm_up_time(Duration::from_secs(1));

    let mut all = Vec::new();
    for writers in WRITERS {
        let configs: Vec<Config> = Strategy::ALL
            .iter()
            .map(|&strategy| b.config(strategy, writers))
            .collect();
        let mut round = 0;
        group.throughput(Throughput::Elements(
            (Strategy::ALL.len() * writers * BATCH) as u64,
        ));
        group.bench_function(format!("all_in_turn/{writers}_writers"), |bench| {
            bench.iter_custom(|iters| {
                round += 1;
                let mut total = Duration::ZERO;
                for i in 0..configs.len() {
                    let config = &configs[(round + i) % configs.len()];
                    total += b.rt.block_on(b.run(config, iters));
                }
                total
            })
        });
        b.rt.block_on(async {
            // Backends flush their table statistics at most once a second.
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            for config in &configs {
                b.finish(config).await;
            }
        });
        all.extend(configs);
    }
    group.finish();
    print_summary(&all);
}

/// The `p`-th percentile of `values` (sorted in place).
fn percentile<T: Copy + PartialOrd + Default>(values: &mut [T], p: usize) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values
        .get((values.len() * p).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

fn print_summary(configs: &[Config]) {
    let rate = |m: &Measured| m.events as f64 / m.elapsed.as_secs_f64().max(1e-9);
    let per_100k = |x: u64, m: &Measured| x as f64 * 100_000.0 / m.events.max(1) as f64;
    println!(
        "\n{:<38} {:>7} {:>10} {:>8} {:>13} {:>7} {:>9} {:>9} {:>11} {:>10} {:>9}",
        "strategy (batches of 100, 10% dup)",
        "writers",
        "events/s",
        "× plain",
        "rounds' range",
        "× own",
        "mean ms",
        "p99 ms",
        "WAL/100k",
        "dead/100k",
        "dup rate"
    );
    for config in configs {
        let rounds_of = |strategy| {
            configs
                .iter()
                .find(|c| c.strategy == strategy && c.writers == config.writers)
                .map(|c| c.measured.lock().unwrap().rounds.clone())
                .unwrap_or_default()
        };
        let (plain, own) = (rounds_of(Strategy::Plain), rounds_of(Strategy::PlainKept));
        let m = config.measured.lock().unwrap();
        if m.events == 0 {
            continue;
        }
        // Each measured round's ratio: the same batches' time with the baseline over
        // this strategy's. (Criterion's samples all run as many batches; its warm-up
        // calls, fewer.)
        let sample = m.rounds.last().map_or(0, |r| r.0);
        let ratios = |baseline: &[(u64, Duration)]| -> Vec<f64> {
            m.rounds
                .iter()
                .zip(baseline)
                .filter(|(own, _)| own.0 == sample)
                .map(|(own, base)| base.1.as_secs_f64() / own.1.as_secs_f64().max(1e-9))
                .collect()
        };
        let (mut ratios, mut own_ratios) = (ratios(&plain), ratios(&own));
        let median = percentile(&mut ratios, 50);
        let own_median = percentile(&mut own_ratios, 50);
        let (low, high) = (
            ratios.first().copied().unwrap_or(f64::NAN),
            ratios.last().copied().unwrap_or(f64::NAN),
        );
        let mut batches = m.batches.clone();
        let p99 = percentile(&mut batches, 99);
        let mean = m.batches.iter().sum::<Duration>().as_secs_f64() / m.batches.len().max(1) as f64;
        println!(
            "{:<38} {:>7} {:>10.0} {:>8.2} {:>13} {:>7.2} {:>9.2} {:>9.2} {:>9.1}MB {:>10.0} {:>8.1}%",
            config.strategy.name(),
            config.writers,
            rate(&m),
            median,
            format!("{low:.2}–{high:.2}"),
            own_median,
            mean * 1e3,
            p99.as_secs_f64() * 1e3,
            per_100k(m.wal_bytes, &m) / 1e6,
            per_100k(m.dead_tuples, &m),
            100.0 * (1.0 - m.rows as f64 / m.events.max(1) as f64),
        );
    }
    println!(
        "(events/s over all of criterion's rounds, warm-up included; × plain: the median over \
         criterion's samples (rounds) of the ratio to plain ON CONFLICT through sqlx with as \
         many writers, run moments apart on the same server, and its lowest–highest; × own: \
         the same ratio to plain ON CONFLICT on connections of the writers' own; WAL and \
         dead tuples per 100,000 events offered, duplicates included; dup rate: share of \
         events that found their id already stored)\n"
    );
}

criterion_group!(benches, keyed_ingest);
criterion_main!(benches);
