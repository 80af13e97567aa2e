//! Lease operations against a real PostgreSQL server, as ratios to the `SELECT 1`
//! round trip on the same pool (the floor for any statement):
//! take+release of one lease, batched takes of 10/100/1,000 leases, a batched
//! renewal, and the advisory-lock baseline (`pg_try_advisory_lock` + unlock).
//!
//! `cargo bench -p scheduler-benches --bench leases`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use scheduler_benches::{Ratios, database};
use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DbBackend, Statement};

static RATIOS: Ratios = Ratios::new();

struct Bench {
    rt: tokio::runtime::Runtime,
    store: PostgresStore,
    tick: std::sync::atomic::AtomicI64,
}

impl Bench {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store = rt.block_on(async {
            let url = database().await;
            PostgresStore::connect(&url, PostgresOptions::default().max_connections(1))
                .await
                .unwrap()
        });
        let start = Utc::now().timestamp_micros();
        Self {
            rt,
            store,
            tick: start.into(),
        }
    }

    /// A tick later than every one before.
    fn next_tick(&self) -> Tick {
        let us = self.tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Tick::new(
            DateTime::<Utc>::from_timestamp_micros(us).unwrap_or_default() + TimeDelta::zero(),
        )
    }
}

fn names(prefix: &str, n: usize) -> Vec<LeaseName> {
    (0..n)
        .map(|i| LeaseName::new(format!("{prefix}-{i:05}")).unwrap())
        .collect()
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).unwrap()
}

fn leases(c: &mut Criterion) {
    let b = Bench::new();
    let mut group = c.benchmark_group("leases");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));

    group.throughput(Throughput::Elements(1));
    group.bench_function("select_1", |bench| {
        bench.iter_custom(|iters| {
            b.rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    b.store
                        .connection()
                        .query_one_raw(Statement::from_string(DbBackend::Postgres, "SELECT 1"))
                        .await
                        .unwrap();
                }
                let total = t.elapsed();
                RATIOS.record("SELECT 1 (floor)", total, iters, 1);
                total
            })
        })
    });

    group.bench_function("advisory_lock_unlock", |bench| {
        let pool = b.store.connection().get_postgres_connection_pool().clone();
        bench.iter_custom(|iters| {
            b.rt.block_on(async {
                let t = Instant::now();
                for i in 0..iters {
                    let mut conn = pool.acquire().await.unwrap();
                    let key = (i % 1000) as i64;
                    let _: (bool,) = sea_orm::sqlx::query_as("SELECT pg_try_advisory_lock($1)")
                        .bind(key)
                        .fetch_one(&mut *conn)
                        .await
                        .unwrap();
                    let _: (bool,) = sea_orm::sqlx::query_as("SELECT pg_advisory_unlock($1)")
                        .bind(key)
                        .fetch_one(&mut *conn)
                        .await
                        .unwrap();
                }
                let total = t.elapsed();
                RATIOS.record("advisory lock + unlock (baseline)", total, iters, 1);
                total
            })
        })
    });

    let one = names("one", 1);
    group.bench_function("take_release_1", |bench| {
        bench.iter_custom(|iters| {
            b.rt.block_on(async {
                let t = Instant::now();
                for _ in 0..iters {
                    let taken = b
                        .store
                        .take(&[TakeRequest::new(one[0].clone(), b.next_tick())], ttl())
                        .await
                        .unwrap();
                    let keys: Vec<_> = taken.won.iter().map(|l| l.key()).collect();
                    assert_eq!(keys.len(), 1);
                    b.store.release(&keys, Release::Completed).await.unwrap();
                }
                let total = t.elapsed();
                RATIOS.record("take + release, 1 lease", total, iters, 1);
                total
            })
        })
    });

    for n in [10usize, 100, 1000] {
        let batch = names(&format!("batch{n}"), n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("take_batch_{n}"), |bench| {
            bench.iter_custom(|iters| {
                b.rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let tick = b.next_tick();
                        let reqs: Vec<_> = batch
                            .iter()
                            .map(|n| TakeRequest::new(n.clone(), tick))
                            .collect();
                        let t = Instant::now();
                        let taken = b.store.take(&reqs, ttl()).await.unwrap();
                        total += t.elapsed();
                        assert_eq!(taken.won.len(), n);
                        let keys: Vec<_> = taken.won.iter().map(|l| l.key()).collect();
                        b.store.release(&keys, Release::Completed).await.unwrap();
                    }
                    RATIOS.record(&format!("batched take, {n} leases"), total, iters, n as u64);
                    total
                })
            })
        });
        let tick = b.next_tick();
        let reqs: Vec<_> = batch
            .iter()
            .map(|n| TakeRequest::new(n.clone(), tick))
            .collect();
        let held = b.rt.block_on(b.store.take(&reqs, ttl())).unwrap().won;
        let keys: Vec<_> = held.iter().map(|l| l.key()).collect();
        group.bench_function(format!("renew_batch_{n}"), |bench| {
            bench.iter_custom(|iters| {
                b.rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        assert_eq!(b.store.renew(&keys, ttl()).await.unwrap().len(), n);
                    }
                    let total = t.elapsed();
                    RATIOS.record(
                        &format!("batched renew, {n} leases"),
                        total,
                        iters,
                        n as u64,
                    );
                    total
                })
            })
        });
        b.rt.block_on(b.store.release(&keys, Release::Completed))
            .unwrap();
        // A losing batch: every name held elsewhere (must not write).
        let held =
            b.rt.block_on(
                b.store.take(
                    &reqs
                        .iter()
                        .map(|r| TakeRequest::new(r.name.clone(), b.next_tick()))
                        .collect::<Vec<_>>(),
                    ttl(),
                ),
            )
            .unwrap()
            .won;
        group.bench_function(format!("losing_take_batch_{n}"), |bench| {
            bench.iter_custom(|iters| {
                b.rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        let tick = b.next_tick();
                        let reqs: Vec<_> = batch
                            .iter()
                            .map(|n| TakeRequest::new(n.clone(), tick))
                            .collect();
                        assert!(b.store.take(&reqs, ttl()).await.unwrap().won.is_empty());
                    }
                    let total = t.elapsed();
                    RATIOS.record(
                        &format!("losing batched take, {n} leases"),
                        total,
                        iters,
                        n as u64,
                    );
                    total
                })
            })
        });
        let keys: Vec<_> = held.iter().map(|l| l.key()).collect();
        b.rt.block_on(b.store.release(&keys, Release::Completed))
            .unwrap();
    }
    group.finish();
    RATIOS.print("SELECT 1 (floor)");
}

criterion_group!(benches, leases);
criterion_main!(benches);
