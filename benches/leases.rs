//! Lease operations against a real PostgreSQL server, each as a ratio to the same SQL
//! sent raw through sqlx, on a connection of its own to the same server, in the same
//! run: what the crate adds to its statements (its pool, the bound, decoding). The
//! store has its default options (a pool of 4, lease statements bounded by 2 s).
//!
//! - take + release of one lease; takes of 100 and 1,000 leases; a losing take of 100
//!   (every lease held elsewhere); a renewal of 100: the store against its own
//!   statement text ([`PostgresStore::lease_sql`]: the take it sends once it knows
//!   the pauses) run raw;
//! - the clock read: `store.now()` against `SELECT clock_timestamp()`;
//! - a release of 1,000 leases planned generically (`plan_cache_mode =
//!   force_generic_plan`) against the same release planned for its arguments, with
//!   the lease table's statistics taken while every lease was released;
//!
//! and the WAL written per renewed lease: the store's renewal of 100 and of 1,000
//! leases against a plain `UPDATE … SET expires_at = …` per lease.
//!
//! `cargo bench -p scheduler-benches --bench leases`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use scheduler_benches::{Ratios, database};
use scheduler_core::{LeaseKey, LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::sqlx::{self, Connection, Executor, PgConnection, Row, postgres::PgRow};
use tokio::sync::Mutex;

static RATIOS: Ratios = Ratios::new();

/// The ttl of every lease taken here, in milliseconds.
const TTL_MS: i64 = 60_000;

fn ttl() -> Ttl {
    Ttl::new(Duration::from_millis(TTL_MS.unsigned_abs())).unwrap()
}

struct Bench {
    rt: tokio::runtime::Runtime,
    store: PostgresStore,
    /// The database's URL.
    url: String,
    /// A connection of the baseline's own: the store's statements, sent raw.
    raw: Mutex<PgConnection>,
    /// The take, renew and release statements, as the store sends them.
    sql: [String; 4],
    /// The control version the raw take is sent at.
    version: i64,
    /// Microseconds of the last tick handed out.
    tick: AtomicI64,
    /// Holders handed out to the raw statements.
    holders: AtomicU64,
}

/// One raw take's answer: the names won, with the holder asked as.
type Won = (Vec<String>, Vec<String>);

impl Bench {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let url = rt.block_on(database());
        let (store, raw, version) = rt.block_on(async {
            let store = PostgresStore::connect(&url, PostgresOptions::default())
                .await
                .unwrap();
            let mut raw = PgConnection::connect(&url).await.unwrap();
            // No control changes during the bench: the version stays.
            let version: i64 =
                sqlx::query_scalar("SELECT version FROM scheduler_leases_version WHERE id = 1")
                    .fetch_one(&mut raw)
                    .await
                    .unwrap();
            (store, raw, version)
        });
        let sql = store.lease_sql().map(str::to_owned);
        Self {
            rt,
            store,
            url,
            raw: Mutex::new(raw),
            sql,
            version,
            tick: Utc::now().timestamp_micros().into(),
            holders: AtomicU64::new(0),
        }
    }

    /// A tick later than every one before.
    fn next_tick(&self) -> Tick {
        let us = self.tick.fetch_add(1, Ordering::Relaxed) + 1;
        Tick::new(DateTime::<Utc>::from_timestamp_micros(us).unwrap())
    }

    /// A fresh holder for a raw take, as long as the store's (`host:pid:random`).
    fn next_holder(&self) -> String {
        let n = self.holders.fetch_add(1, Ordering::Relaxed);
        format!("bench-raw:{}:{n:016x}", std::process::id())
    }

    async fn crate_take(&self, names: &[LeaseName]) -> Vec<LeaseKey> {
        let tick = self.next_tick();
        let requests: Vec<_> = names
            .iter()
            .map(|name| TakeRequest::new(name.clone(), tick))
            .collect();
        let taken = self.store.take(&requests, ttl()).await.unwrap();
        taken.won.iter().map(|l| l.key()).collect()
    }

    async fn raw_take(&self, conn: &mut PgConnection, names: &[String]) -> Won {
        let tick = self.next_tick().at();
        let ticks = vec![tick; names.len()];
        let holders: Vec<String> = names.iter().map(|_| self.next_holder()).collect();
        // The take the store sends once it knows the pauses (after its first take):
        // each request says it is not paused, at the table's control version.
        let rows: Vec<PgRow> = sqlx::query(sqlx::AssertSqlSafe(self.sql[3].as_str()))
            .bind(names)
            .bind(&ticks)
            .bind(&holders)
            .bind(TTL_MS)
            .bind(vec![false; names.len()])
            .bind(self.version)
            // No triggered run keeps a completion.
            .bind(Vec::<String>::new())
            .bind(Vec::<String>::new())
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        rows.iter()
            .filter(|row| row.get::<bool, _>("won"))
            .map(|row| (row.get("name"), row.get("holder")))
            .unzip()
    }

    async fn raw_renew(&self, conn: &mut PgConnection, (names, holders): &Won) -> usize {
        sqlx::query(sqlx::AssertSqlSafe(self.sql[1].as_str()))
            .bind(names)
            .bind(holders)
            .bind(TTL_MS)
            .fetch_all(&mut *conn)
            .await
            .unwrap()
            .len()
    }

    async fn raw_release(&self, conn: &mut PgConnection, (names, holders): &Won) -> usize {
        sqlx::query(sqlx::AssertSqlSafe(self.sql[2].as_str()))
            .bind(names)
            .bind(holders)
            .bind(true)
            .fetch_all(&mut *conn)
            .await
            .unwrap()
            .len()
    }

    async fn wal_position(&self) -> String {
        let mut conn = self.raw.lock().await;
        sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(&mut *conn)
            .await
            .unwrap()
    }

    /// WAL bytes between two positions.
    async fn wal_since(&self, from: &str) -> f64 {
        let to = self.wal_position().await;
        let mut conn = self.raw.lock().await;
        sqlx::query_scalar::<_, f64>("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8")
            .bind(to)
            .bind(from)
            .fetch_one(&mut *conn)
            .await
            .unwrap()
    }
}

fn names(prefix: &str, n: usize) -> Vec<LeaseName> {
    (0..n)
        .map(|i| LeaseName::new(format!("{prefix}-{i:05}")).unwrap())
        .collect()
}

fn strings(names: &[LeaseName]) -> Vec<String> {
    names.iter().map(|n| n.as_str().to_owned()).collect()
}

/// Benchmarks one pair of [`PAIRS`] as `id`: `run(iters)` runs `iters` rounds, each
/// the crate's operation then the baseline's (so both meet the same machine, whatever
/// else runs on it), and returns the time each counted. Both are recorded in
/// [`RATIOS`]; criterion reports the crate's.
fn paired(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: &str,
    pair: (&str, &str, f64),
    elements: u64,
    mut run: impl FnMut(u64) -> (Duration, Duration),
) {
    group.throughput(Throughput::Elements(elements));
    group.bench_function(id, |bench| {
        bench.iter_custom(|iters| {
            let (ours, baseline) = run(iters);
            RATIOS.record(pair.0, ours, iters, elements);
            RATIOS.record(pair.1, baseline, iters, elements);
            ours
        })
    });
}

/// The rows compared, as (crate, baseline, goal for their ratio).
const PAIRS: &[(&str, &str, f64)] = &[
    (
        "take + release, 1 lease",
        "take + release, 1 lease (raw SQL)",
        1.3,
    ),
    ("take, 100 leases", "take, 100 leases (raw SQL)", 1.3),
    ("take, 1,000 leases", "take, 1,000 leases (raw SQL)", 1.3),
    (
        "losing take, 100 leases",
        "losing take, 100 leases (raw SQL)",
        1.3,
    ),
    ("renew, 100 leases", "renew, 100 leases (raw SQL)", 1.3),
    ("clock read", "SELECT clock_timestamp() (raw SQL)", 1.5),
    (
        "release 1,000, generic plan (raw SQL)",
        "release 1,000, custom plan (raw SQL)",
        1.3,
    ),
];

/// Time since `t`, added to `total`.
fn lap(total: &mut Duration, t: Instant) {
    *total += t.elapsed();
}

fn leases(c: &mut Criterion) {
    let b = Bench::new();
    let mut group = c.benchmark_group("leases");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));

    // Take + release of one lease, both timed.
    let one = names("one", 1);
    let one_raw = strings(&names("one-raw", 1));
    paired(&mut group, "take_release_1", PAIRS[0], 1, |iters| {
        b.rt.block_on(async {
            let mut conn = b.raw.lock().await;
            let (mut ours, mut raw) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..iters {
                let t = Instant::now();
                let keys = b.crate_take(&one).await;
                b.store.release(&keys, Release::Completed).await.unwrap();
                lap(&mut ours, t);
                assert_eq!(keys.len(), 1);
                let t = Instant::now();
                let won = b.raw_take(&mut conn, &one_raw).await;
                b.raw_release(&mut conn, &won).await;
                lap(&mut raw, t);
                assert_eq!(won.0.len(), 1);
            }
            (ours, raw)
        })
    });

    // Takes of 100 and 1,000 free leases; only the take is timed.
    for (n, pair) in [(100usize, PAIRS[1]), (1000, PAIRS[2])] {
        let batch = names(&format!("take{n}"), n);
        let batch_raw = strings(&names(&format!("take{n}-raw"), n));
        paired(&mut group, &format!("take_{n}"), pair, n as u64, |iters| {
            b.rt.block_on(async {
                let mut conn = b.raw.lock().await;
                let (mut ours, mut raw) = (Duration::ZERO, Duration::ZERO);
                for _ in 0..iters {
                    let t = Instant::now();
                    let keys = b.crate_take(&batch).await;
                    lap(&mut ours, t);
                    assert_eq!(keys.len(), n);
                    b.store.release(&keys, Release::Completed).await.unwrap();
                    let t = Instant::now();
                    let won = b.raw_take(&mut conn, &batch_raw).await;
                    lap(&mut raw, t);
                    assert_eq!(won.0.len(), n);
                    b.raw_release(&mut conn, &won).await;
                }
                (ours, raw)
            })
        });
    }

    // 100 leases held by the store: a losing take of them, and their renewal.
    let held_names = names("held100", 100);
    let held = b.rt.block_on(b.crate_take(&held_names));
    assert_eq!(held.len(), 100);
    let held_strings = strings(&held_names);
    paired(&mut group, "losing_take_100", PAIRS[3], 100, |iters| {
        b.rt.block_on(async {
            let mut conn = b.raw.lock().await;
            let (mut ours, mut raw) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..iters {
                let t = Instant::now();
                let keys = b.crate_take(&held_names).await;
                lap(&mut ours, t);
                assert!(keys.is_empty());
                let t = Instant::now();
                let won = b.raw_take(&mut conn, &held_strings).await;
                lap(&mut raw, t);
                assert!(won.0.is_empty());
            }
            (ours, raw)
        })
    });
    let held_raw: Won = (
        held.iter().map(|k| k.name.as_str().to_owned()).collect(),
        held.iter().map(|k| k.holder.as_str().to_owned()).collect(),
    );
    paired(&mut group, "renew_100", PAIRS[4], 100, |iters| {
        b.rt.block_on(async {
            let mut conn = b.raw.lock().await;
            let (mut ours, mut raw) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..iters {
                let t = Instant::now();
                let renewed = b.store.renew(&held, ttl()).await.unwrap();
                lap(&mut ours, t);
                assert_eq!(renewed.len(), 100);
                let t = Instant::now();
                let renewed = b.raw_renew(&mut conn, &held_raw).await;
                lap(&mut raw, t);
                assert_eq!(renewed, 100);
            }
            (ours, raw)
        })
    });

    // The clock.
    paired(&mut group, "clock", PAIRS[5], 1, |iters| {
        b.rt.block_on(async {
            let mut conn = b.raw.lock().await;
            let (mut ours, mut raw) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..iters {
                let t = Instant::now();
                b.store.now().await.unwrap();
                lap(&mut ours, t);
                let t = Instant::now();
                let _: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                lap(&mut raw, t);
            }
            (ours, raw)
        })
    });

    // A release of 1,000 leases planned generically and for its arguments, on two
    // connections of the baseline's. The leases are the only rows of a lease table of
    // their own, whose statistics were taken while all were released, as recurring
    // jobs leave them most of the time (and kept: autovacuum off for the table): the
    // state in which a generic plan of the earlier release compared every lease with
    // every name. Only the releases are timed.
    let thousand = names("release1000", 1000);
    let (releasing, release_sql, mut plans) = b.rt.block_on(async {
        let options = PostgresOptions::default().table("bench_release").unwrap();
        let store = PostgresStore::connect(&b.url, options).await.unwrap();
        let tick = b.next_tick();
        let requests: Vec<_> = thousand
            .iter()
            .map(|name| TakeRequest::new(name.clone(), tick))
            .collect();
        let won = store.take(&requests, ttl()).await.unwrap().won;
        let keys: Vec<_> = won.iter().map(|l| l.key()).collect();
        store.release(&keys, Release::Completed).await.unwrap();
        let mut conn = b.raw.lock().await;
        conn.execute("ALTER TABLE bench_release SET (autovacuum_enabled = false)")
            .await
            .unwrap();
        conn.execute("ANALYZE bench_release").await.unwrap();
        let mut plans = Vec::new();
        for setting in ["force_generic_plan", "force_custom_plan"] {
            let mut conn = PgConnection::connect(&b.url).await.unwrap();
            conn.execute(sqlx::AssertSqlSafe(format!(
                "SET plan_cache_mode = {setting}"
            )))
            .await
            .unwrap();
            plans.push(conn);
        }
        let sql = store.lease_sql()[2].to_owned();
        (store, sql, plans)
    });
    paired(&mut group, "release_1000", PAIRS[6], 1000, |iters| {
        b.rt.block_on(async {
            let mut times = [Duration::ZERO; 2];
            for _ in 0..iters {
                for (conn, time) in plans.iter_mut().zip(&mut times) {
                    let tick = b.next_tick();
                    let requests: Vec<_> = thousand
                        .iter()
                        .map(|name| TakeRequest::new(name.clone(), tick))
                        .collect();
                    let won = releasing.take(&requests, ttl()).await.unwrap().won;
                    let won: Won = won
                        .iter()
                        .map(|l| (l.name.as_str().to_owned(), l.holder.as_str().to_owned()))
                        .unzip();
                    let t = Instant::now();
                    let released = sqlx::query(sqlx::AssertSqlSafe(release_sql.as_str()))
                        .bind(&won.0)
                        .bind(&won.1)
                        .bind(true)
                        .fetch_all(&mut *conn)
                        .await
                        .unwrap()
                        .len();
                    lap(time, t);
                    assert_eq!(released, 1000);
                }
            }
            (times[0], times[1])
        })
    });
    group.finish();
    RATIOS.print_pairs(PAIRS);

    // WAL per renewed lease: the store's renewal against a plain update per lease
    // (each its own statement and commit), the fewest bytes of three tries (a
    // checkpoint meanwhile only adds).
    b.rt.block_on(async {
        let thousand = b.crate_take(&names("renew1000", 1000)).await;
        for (what, keys) in [("100", &held), ("1,000", &thousand)] {
            let mut fewest = f64::MAX;
            for _ in 0..3 {
                let from = b.wal_position().await;
                assert_eq!(b.store.renew(keys, ttl()).await.unwrap().len(), keys.len());
                fewest = fewest.min(b.wal_since(&from).await);
            }
            println!(
                "WAL per renewed lease, store renewal of {what}: {:.1} B",
                fewest / keys.len() as f64
            );
        }
        let plain = format!(
            "UPDATE {} SET expires_at = now() + $3::bigint * interval '1 millisecond' \
             WHERE name = $1 AND holder = $2 AND released_at IS NULL",
            b.store.table().quoted()
        );
        let mut fewest = f64::MAX;
        for _ in 0..3 {
            let from = b.wal_position().await;
            let mut conn = b.raw.lock().await;
            for key in &held {
                sqlx::query(sqlx::AssertSqlSafe(plain.as_str()))
                    .bind(key.name.as_str())
                    .bind(key.holder.as_str())
                    .bind(TTL_MS)
                    .execute(&mut *conn)
                    .await
                    .unwrap();
            }
            drop(conn);
            fewest = fewest.min(b.wal_since(&from).await);
        }
        println!(
            "WAL per renewed lease, plain UPDATE per lease (100, one commit each): {:.1} B\n",
            fewest / held.len() as f64
        );
    });
}

criterion_group!(benches, leases);
criterion_main!(benches);
