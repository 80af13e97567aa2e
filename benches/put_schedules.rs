//! Issue 36's target: [`Controls::put_schedules`] stores 100,000 dynamic schedules in
//! under 5 s on PostgreSQL, one version bump for the batch.
//!
//! Each sample puts the same 100,000 rows (per-customer daily reports, each with its
//! own arguments) into an emptied schedules table:
//! - `postgres put_schedules`: the API, every row checked, then one transaction of
//!   chunked `INSERT … SELECT FROM unnest(…)`;
//! - `postgres raw bulk INSERT (baseline)`: the same statements (bump, chunks of
//!   10,000 rows, audit row, one transaction) sent raw through sea-orm's sqlx
//!   connection, nothing checked: what the database alone costs;
//! - `sqlite put_schedules`: the API on a SQLite file (no baseline).
//!
//! The rows' schedule texts are 86,400 distinct cron expressions (one per second of
//! the day): each is parsed once per batch, the costliest part of the checks, which
//! is printed apart.
//!
//! Prints rows per second and the ratio to the baseline measured in the same run.
//! Runs against a throwaway server of its own, or a new database on `DATABASE_URL`'s.
//! `PUT_SCHEDULES_ROWS` sets the batch size (100000).
//!
//! `cargo bench -p scheduler-benches --bench put_schedules`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use scheduler_core::{Controls, ScheduleRow};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement};
use sea_orm::{TransactionTrait, Value};

const BASELINE: &str = "postgres raw bulk INSERT (baseline)";
const CHUNK: usize = 10_000;
const HANDLER: &str = "report";

/// Time per batch, gathered while criterion runs: (name, total, batches).
static TIMES: Mutex<Vec<(String, Duration, u64)>> = Mutex::new(Vec::new());

fn record(name: &str, took: Duration) {
    let mut times = TIMES.lock().unwrap();
    match times.iter_mut().find(|r| r.0 == name) {
        Some(row) => {
            row.1 += took;
            row.2 += 1;
        }
        None => times.push((name.to_owned(), took, 1)),
    }
}

fn print(rows: usize) {
    let times = TIMES.lock().unwrap();
    let mean = |r: &(String, Duration, u64)| r.1.as_secs_f64() / r.2.max(1) as f64;
    let base = times.iter().find(|r| r.0 == BASELINE).map(mean);
    println!(
        "\n{rows} rows a batch\n{:<40} {:>10} {:>12} {:>14}",
        "", "s/batch", "rows/s", "× baseline"
    );
    for r in times.iter() {
        let m = mean(r);
        let ratio = base.map_or("-".to_owned(), |b| format!("{:.2}", m / b));
        println!(
            "{:<40} {:>10.3} {:>12.0} {:>14}",
            r.0,
            m,
            rows as f64 / m,
            ratio
        );
    }
    println!("(baseline measured in the same run; each batch into an emptied table)\n");
}

fn rows(n: usize) -> Vec<ScheduleRow> {
    (0..n)
        .map(|i| {
            let mut row = ScheduleRow::new(
                format!("customer-{i:06}"),
                HANDLER,
                format!("{} {} {} * * *", i % 60, (i / 60) % 60, (i / 3600) % 24),
            );
            row.args = format!(r#"{{"customer": {i}, "report": "daily"}}"#);
            row
        })
        .collect()
}

async fn empty_postgres(conn: &DatabaseConnection) {
    conn.execute_unprepared("TRUNCATE scheduler_leases_schedules, scheduler_leases_audit")
        .await
        .unwrap();
}

/// The baseline: the statements `put_schedules` sends, raw, nothing checked.
async fn raw_bulk(conn: &DatabaseConnection, rows: &[ScheduleRow]) {
    let txn = conn.begin().await.unwrap();
    let run = |sql: &'static str, values: Vec<Value>| {
        txn.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
    };
    run(
        "UPDATE scheduler_leases_version SET version = version + 1 WHERE id = 1",
        Vec::new(),
    )
    .await
    .unwrap();
    for chunk in rows.chunks(CHUNK) {
        let column = |f: &dyn Fn(&ScheduleRow) -> String| -> Value {
            chunk.iter().map(f).collect::<Vec<String>>().into()
        };
        let values = vec![
            column(&|r| r.name.clone()),
            column(&|r| r.handler.clone()),
            column(&|r| r.schedule.clone()),
            column(&|r| r.args.clone()),
        ];
        run(
            "INSERT INTO scheduler_leases_schedules AS s (name, handler, schedule, zone, scope, \
               policy, args, enabled, removed, version, updated_at, actor) \
             SELECT n, h, sc, NULL, 'cluster', '', a::jsonb, true, false, \
                    (SELECT version FROM scheduler_leases_version WHERE id = 1), now(), 'bench' \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(n, h, sc, a) \
             ON CONFLICT (name) DO UPDATE \
               SET handler = excluded.handler, schedule = excluded.schedule, \
                   args = excluded.args, version = excluded.version, \
                   updated_at = excluded.updated_at, actor = excluded.actor",
            values,
        )
        .await
        .unwrap();
    }
    run(
        "INSERT INTO scheduler_leases_audit (at, job, node, action, actor, why, detail) \
         VALUES (now(), 'customer-000000', NULL, 'schedule_put', 'bench', '', 'raw')",
        Vec::new(),
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();
}

fn bench(c: &mut Criterion) {
    let n: usize = std::env::var("PUT_SCHEDULES_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let batch = Arc::new(rows(n));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(test_postgres::TestDb::new());
    let (store, conn) = rt.block_on(async {
        let store = PostgresStore::connect(db.url(), PostgresOptions::default())
            .await
            .unwrap();
        store
            .register_handlers("bench", &[HANDLER.to_owned()])
            .await
            .unwrap();
        (store, Database::connect(db.url()).await.unwrap())
    });
    let dir = std::env::temp_dir().join(format!("put-schedules-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = rt.block_on(async {
        let store = SqliteStore::open(&dir.join("leases.db"), SqliteOptions::default())
            .await
            .unwrap();
        store
            .register_handlers("bench", &[HANDLER.to_owned()])
            .await
            .unwrap();
        store
    });

    let mut group = c.benchmark_group("put_schedules");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(100));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function(BASELINE, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(empty_postgres(&conn));
                let start = Instant::now();
                rt.block_on(raw_bulk(&conn, &batch));
                let took = start.elapsed();
                record(BASELINE, took);
                total += took;
            }
            total
        });
    });
    group.bench_function("postgres put_schedules", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(empty_postgres(&conn));
                let start = Instant::now();
                rt.block_on(store.put_schedules(&batch, "bench", "customers"))
                    .unwrap();
                let took = start.elapsed();
                record("postgres put_schedules", took);
                total += took;
            }
            total
        });
    });
    group.bench_function("sqlite put_schedules", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                rt.block_on(sqlite.put_schedules(&batch, "bench", "customers"))
                    .unwrap();
                let took = start.elapsed();
                record("sqlite put_schedules (upsert)", took);
                total += took;
            }
            total
        });
    });
    group.finish();
    print(n);
    // Where the API's time over the baseline goes: each row's own check (a cron
    // text parsed and its shortest gap found), every row's text distinct here.
    let start = Instant::now();
    for row in batch.iter() {
        row.check_with_min_period(Duration::from_secs(1)).unwrap();
    }
    println!(
        "ScheduleRow::check_with_min_period of every row: {:.3} s\n",
        start.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
