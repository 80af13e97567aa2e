//! The cost of transaction pooling: the same lease operations directly on the server
//! and through PgBouncer 1.18 in `pool_mode = transaction` (with `pgbouncer=true`:
//! each statement unnamed in a transaction of its own), as ratios to the direct
//! take + release measured in the same run.
//!
//! `cargo bench -p scheduler-benches --bench transaction_pooling` (needs `pgbouncer`
//! installed; run it without `TEST_POSTGRES_PGBOUNCER`, which would put the "direct"
//! server behind one too: see `test_postgres::pgbouncer_mode`)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use scheduler_benches::Ratios;
use scheduler_core::{LeaseName, Release, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use test_postgres::{PgBouncer, TestServer};

static RATIOS: Ratios = Ratios::new();

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(60)).unwrap()
}

fn names(prefix: &str, n: usize) -> Vec<LeaseName> {
    (0..n)
        .map(|i| LeaseName::new(format!("{prefix}-{i:05}")).unwrap())
        .collect()
}

fn pooling(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = TestServer::start().expect("server");
    let bouncer = PgBouncer::start(server.port()).expect("pgbouncer");
    let (direct, pooled) = rt.block_on(async {
        let url = server.create_database().await;
        let name = url
            .rsplit('/')
            .next()
            .unwrap()
            .split('?')
            .next()
            .unwrap()
            .to_owned();
        let options = || PostgresOptions::default().max_connections(1);
        let direct = PostgresStore::connect(&server.direct_url(&name), options())
            .await
            .unwrap();
        let pooled = PostgresStore::connect(&bouncer.url(&name), options())
            .await
            .unwrap();
        assert!(pooled.transaction_pooling() && !direct.transaction_pooling());
        (direct, pooled)
    });
    let tick = std::sync::atomic::AtomicI64::new(Utc::now().timestamp_micros());
    let next_tick = || {
        let us = tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Tick::new(DateTime::<Utc>::from_timestamp_micros(us).unwrap_or_default())
    };

    let mut group = c.benchmark_group("pgbouncer");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for (label, store) in [("direct", &direct), ("through PgBouncer", &pooled)] {
        let one = names(&format!("one-{label}"), 1);
        group.bench_function(format!("take_release_1 {label}"), |bench| {
            bench.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        let taken = store
                            .take(&[TakeRequest::new(one[0].clone(), next_tick())], ttl())
                            .await
                            .unwrap();
                        let keys: Vec<_> = taken.won.iter().map(|l| l.key()).collect();
                        assert_eq!(keys.len(), 1);
                        store.release(&keys, Release::Completed).await.unwrap();
                    }
                    let total = t.elapsed();
                    RATIOS.record(
                        &format!("take + release, 1 lease, {label}"),
                        total,
                        iters,
                        1,
                    );
                    total
                })
            })
        });
        let batch = names(&format!("batch-{label}"), 100);
        let held_tick = next_tick();
        let reqs: Vec<_> = batch
            .iter()
            .map(|n| TakeRequest::new(n.clone(), held_tick))
            .collect();
        let held = rt.block_on(store.take(&reqs, ttl())).unwrap().won;
        assert_eq!(held.len(), 100);
        let keys: Vec<_> = held.iter().map(|l| l.key()).collect();
        group.bench_function(format!("renew_batch_100 {label}"), |bench| {
            bench.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        assert_eq!(store.renew(&keys, ttl()).await.unwrap().len(), 100);
                    }
                    let total = t.elapsed();
                    RATIOS.record(
                        &format!("batched renew, 100 leases, {label}"),
                        total,
                        iters,
                        100,
                    );
                    total
                })
            })
        });
        group.bench_function(format!("losing_take_batch_100 {label}"), |bench| {
            bench.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        let lost = store.take(&reqs, ttl()).await.unwrap();
                        assert!(lost.won.is_empty());
                    }
                    let total = t.elapsed();
                    RATIOS.record(
                        &format!("losing take, 100 leases, {label}"),
                        total,
                        iters,
                        100,
                    );
                    total
                })
            })
        });
        group.bench_function(format!("clock_read {label}"), |bench| {
            bench.iter_custom(|iters| {
                rt.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        store.now().await.unwrap();
                    }
                    let total = t.elapsed();
                    RATIOS.record(&format!("clock read, {label}"), total, iters, 1);
                    total
                })
            })
        });
        rt.block_on(store.release(&keys, Release::Completed))
            .unwrap();
    }
    group.finish();
    RATIOS.print("take + release, 1 lease, direct");
    drop(bouncer);
}

criterion_group!(benches, pooling);
criterion_main!(benches);
