//! The dashboard's pages at scale, on SQLite and on PostgreSQL: 100,000 dynamic
//! schedules, 10,000 leases, 20,000 runs (one in ten failed, some with long
//! errors) and 5,000 controls, filled with the bench's own `INSERT`s. The dashboard
//! router is served in-process (`tower::ServiceExt::oneshot`, no socket) and each
//! page is measured: its time and its size in bytes, against a baseline measured in
//! the same run, alternately with it: the page's main SQL (its list query and, for
//! the counted lists, the count) sent raw with plain sqlx on a connection of its
//! own to the same database. The ratio says what the store, the handler and the
//! HTML add. A page over 50 ms or over 200 KB is flagged.
//!
//! The header's counts (jobs, paused, running, failing) are read at most every 5 s
//! by default (`Dashboard::counts_max_age`); the pages marked `counts read` are
//! served by a dashboard that reads them on every page, their baseline with the
//! counts' SQL added: the cost of a page when its counts are due.
//!
//! `cargo bench -p scheduler-benches --bench dashboard_pages` (PostgreSQL: a
//! throwaway server, or `DATABASE_URL`'s).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use criterion::{Criterion, criterion_group, criterion_main};
use scheduler_benches::database;
use scheduler_core::{Heartbeat, Store};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use scheduler_web::Dashboard;
use sea_orm::sqlx::{self, Connection as _, PgConnection, SqliteConnection};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use tower::ServiceExt as _;

const SCHEDULES: u32 = 100_000;
const LEASES: u32 = 10_000;
const RUNS: u32 = 20_000;
const CONTROLS: u32 = 5_000;
const INSTANCES: u32 = 10;
/// Rows per page (the dashboard's default).
const PAGE: u32 = 50;

/// What a page may take and weigh.
const SLOW: Duration = Duration::from_millis(50);
const HEAVY: usize = 200_000;

/// One measured page: (database, page, path, mean page time, bytes, mean raw time).
type Measured = (String, String, String, Duration, usize, Duration);

static ROWS: Mutex<Vec<Measured>> = Mutex::new(Vec::new());

/// A connection for the baseline.
enum Raw {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Raw {
    /// Runs each statement (with `arg` bound to every `$1`/`?1`), returns the rows.
    async fn run(&mut self, sql: &[String], arg: Option<&str>) -> usize {
        let mut n = 0;
        for s in sql {
            let q = sqlx::query(sqlx::AssertSqlSafe(s.clone()));
            n += match self {
                Raw::Sqlite(c) => match arg {
                    Some(a) => q.bind(a.to_owned()).fetch_all(&mut *c).await,
                    None => q.fetch_all(&mut *c).await,
                }
                .map(|r| r.len()),
                Raw::Postgres(c) => {
                    let q = sqlx::query(sqlx::AssertSqlSafe(s.clone()));
                    match arg {
                        Some(a) => q.bind(a.to_owned()).fetch_all(&mut *c).await,
                        None => q.fetch_all(&mut *c).await,
                    }
                    .map(|r| r.len())
                }
            }
            .unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        n
    }
}

/// A page and its baseline: label, path, SQL (`$1` the argument), argument.
struct Case {
    label: &'static str,
    path: String,
    sql: Vec<String>,
    arg: Option<String>,
    /// Served by a dashboard that reads the header's counts on every page
    /// (`counts_max_age(Duration::ZERO)`) instead of every 5 s.
    counts_read: bool,
}

/// The pages measured, with their main SQL in `pg` or SQLite's dialect.
fn cases(pg: bool) -> Vec<Case> {
    let t = "scheduler_leases";
    let p = if pg { "$1" } else { "?1" };
    let not_removed = if pg { "NOT removed" } else { "removed = 0" };
    let sched = format!(
        "SELECT name, handler, schedule, zone, scope, policy, args, enabled, removed, version, \
         updated_at, actor FROM {t}_schedules"
    );
    let lease = format!("SELECT name, holder, tick, token, expires_at, released_at FROM {t}");
    let runs = format!(
        "SELECT id, job, tick, node, token, started, finished, outcome, error, attempt FROM {t}_runs"
    );
    let audit = format!("SELECT id, at, job, node, action, actor, why, detail FROM {t}_audit");
    let more = PAGE + 1;
    // The search as the stores write it: PostgreSQL folds the name (its trigram
    // index is on the folded name), SQLite's LIKE folds ASCII itself.
    let searched = if pg {
        format!("lower(name COLLATE \"C\") LIKE '%' || {p} || '%'")
    } else {
        format!("name LIKE '%' || {p} || '%'")
    };
    let case = |label, path: &str, sql: Vec<String>, arg: Option<&str>| Case {
        label,
        path: path.to_owned(),
        sql,
        arg: arg.map(str::to_owned),
        counts_read: false,
    };
    let counted = |label, path: &str, sql: Vec<String>| Case {
        counts_read: true,
        ..case(label, path, sql, None)
    };
    // The header's counts, as a page reads them when they are older than 5 s.
    let counts = vec![
        format!("SELECT count(*) FROM {t}_schedules WHERE {not_removed}"),
        format!(
            "SELECT count(*) FROM {t} WHERE released_at IS NULL AND expires_at > {}",
            if pg { "now()" } else { "0" }
        ),
        format!(
            "SELECT job, node FROM {t}_controls WHERE {}",
            if pg { "paused" } else { "paused = 1" }
        ),
        // The failing jobs as the stores read them: a skip scan of (job, id).
        format!(
            "WITH RECURSIVE jobs(job) AS ( \
               SELECT min(job) FROM {t}_runs UNION ALL \
               SELECT (SELECT min(r.job) FROM {t}_runs AS r WHERE r.job > jobs.job) \
               FROM jobs WHERE jobs.job IS NOT NULL) \
             SELECT job FROM jobs WHERE job IS NOT NULL AND EXISTS ( \
               SELECT 1 FROM (SELECT r.outcome FROM {t}_runs AS r WHERE r.job = jobs.job \
                 ORDER BY r.id DESC LIMIT 1) AS latest WHERE outcome <> 'succeeded')"
        ),
    ];
    vec![
        case(
            "jobs",
            "/jobs",
            vec![
                format!("{sched} WHERE {not_removed} ORDER BY name LIMIT {more}"),
                format!("SELECT count(*) FROM {t}_schedules WHERE {not_removed}"),
            ],
            None,
        ),
        case(
            "jobs, searched",
            "/jobs?q=report-0999",
            vec![
                format!("{sched} WHERE {not_removed} AND {searched} ORDER BY name LIMIT {more}"),
                format!("SELECT count(*) FROM {t}_schedules WHERE {not_removed} AND {searched}"),
            ],
            Some("report-0999"),
        ),
        case(
            "jobs, last schedule page",
            "/jobs?schedules_after=report-099949",
            vec![format!(
                "{sched} WHERE {not_removed} AND name > {p} ORDER BY name LIMIT {more}"
            )],
            Some("report-099949"),
        ),
        case(
            "leases, first page",
            "/leases",
            vec![
                format!("{lease} ORDER BY name LIMIT {more}"),
                format!("SELECT count(*) FROM {t}"),
            ],
            None,
        ),
        case(
            "leases, last page",
            "/leases?page=last",
            vec![
                format!("{lease} ORDER BY name DESC LIMIT {more}"),
                format!("SELECT count(*) FROM {t}"),
            ],
            None,
        ),
        case(
            "leases, node filter",
            "/leases?node=node-1&held=yes",
            vec![
                format!("{lease} WHERE holder LIKE {p} || ':%' ORDER BY name LIMIT {more}"),
                format!("SELECT count(*) FROM {t} WHERE holder LIKE {p} || ':%'"),
            ],
            Some("node-1"),
        ),
        case(
            "job",
            "/job?name=report-000042",
            vec![
                format!("{runs} WHERE job = {p} ORDER BY id DESC LIMIT {PAGE}"),
                format!("{audit} WHERE job = {p} ORDER BY id DESC LIMIT {PAGE}"),
            ],
            Some("report-000042"),
        ),
        case(
            "failures",
            "/failures",
            vec![format!(
                "{runs} WHERE outcome <> 'succeeded' ORDER BY id DESC LIMIT {more}"
            )],
            None,
        ),
        case(
            "failures, job filter",
            "/failures?job=report-000042",
            vec![format!(
                "{runs} WHERE job = {p} AND outcome <> 'succeeded' ORDER BY id DESC LIMIT {more}"
            )],
            Some("report-000042"),
        ),
        case(
            "audit",
            "/audit",
            vec![format!("{audit} ORDER BY id DESC LIMIT {more}")],
            None,
        ),
        case(
            "instances",
            "/instances",
            vec![
                format!(
                    "SELECT node, version, started_at, seen_at, expires_at, stopped \
                     FROM {t}_instances ORDER BY node"
                ),
                format!("SELECT handler, node FROM {t}_handlers ORDER BY node, handler"),
                format!("SELECT job, node FROM {t}_jobs ORDER BY node, job"),
            ],
            None,
        ),
        counted(
            "audit, counts read",
            "/audit",
            [
                vec![format!("{audit} ORDER BY id DESC LIMIT {more}")],
                counts.clone(),
            ]
            .concat(),
        ),
        counted(
            "jobs, counts read",
            "/jobs",
            [
                vec![
                    format!("{sched} WHERE {not_removed} ORDER BY name LIMIT {more}"),
                    format!("SELECT count(*) FROM {t}_schedules WHERE {not_removed}"),
                ],
                counts,
            ]
            .concat(),
        ),
        case(
            "audit, job filter",
            "/audit?job=report-000042",
            vec![format!(
                "{audit} WHERE job = {p} ORDER BY id DESC LIMIT {more}"
            )],
            Some("report-000042"),
        ),
    ]
}

/// The fill, in `pg` or SQLite's dialect: `n` runs over 0..count.
fn fill(pg: bool) -> Vec<String> {
    let t = "scheduler_leases";
    // Every timestamp in microseconds since the epoch (SQLite) or a timestamptz.
    let series = |n: u32| {
        if pg {
            format!("generate_series(0::bigint, {}) AS g(n)", n - 1)
        } else {
            format!(
                "(WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < {}) \
                 SELECT n FROM s) AS g",
                n - 1
            )
        }
    };
    let at = |us: &str| {
        if pg {
            format!("to_timestamp(({us})::double precision / 1e6)")
        } else {
            format!("({us})")
        }
    };
    let now = if pg {
        "(extract(epoch from now()) * 1e6)::bigint".to_owned()
    } else {
        "(CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))".to_owned()
    };
    // `report-` and `expr` in six digits.
    let name = |expr: &str| {
        if pg {
            format!("'report-' || lpad(({expr})::text, 6, '0')")
        } else {
            format!("printf('report-%06d', {expr})")
        }
    };
    let text = |e: &str| {
        if pg {
            format!("({e})::text")
        } else {
            format!("CAST({e} AS TEXT)")
        }
    };
    let (yes, no) = if pg { ("true", "false") } else { ("1", "0") };
    let repeat = |s: &str, n: u32| {
        if pg {
            format!("repeat('{s}', {n})")
        } else {
            format!("replace(hex(zeroblob({n})), '00', '{s}')")
        }
    };
    vec![
        format!(
            "INSERT INTO {t}_schedules (name, handler, schedule, zone, scope, policy, args, \
             enabled, removed, version, updated_at, actor) \
             SELECT {}, 'report', {} || ' ' || {} || ' 3 * * *', NULL, 'cluster', '', '{{}}', \
             {yes}, {no}, 1, {}, 'bench' FROM {}",
            name("n"),
            text("n % 60"),
            text("n / 60 % 60"),
            at(&now),
            series(SCHEDULES)
        ),
        format!(
            "INSERT INTO {t} (name, holder, tick, token, taken_at, expires_at, released_at) \
             SELECT {}, 'node-' || {} || ':4242:00ff00ff00ff00ff', {}, n + 1, {}, {}, \
             CASE WHEN n % 2 = 0 THEN NULL ELSE {} END FROM {}",
            name("n"),
            text("n % 3"),
            at(&format!("{now} - 60000000")),
            at(&format!("{now} - 60000000")),
            at(&format!("{now} + 600000000")),
            at(&format!("{now} - 30000000")),
            series(LEASES)
        ),
        format!(
            "INSERT INTO {t}_runs (job, tick, node, holder, token, started, finished, outcome, \
             error, lease_lost, attempt) \
             SELECT {}, {}, 'node-' || {}, 'node-' || {} || ':4242:00ff', n + 1, {}, {}, \
             CASE WHEN n % 10 = 0 THEN 'failed' ELSE 'succeeded' END, \
             CASE WHEN n % 500 = 0 THEN 'boom <b>' || {} WHEN n % 10 = 0 THEN 'boom ' || {} END, \
             {no}, 1 FROM {}",
            name("n % 1000"),
            at(&format!("{now} - ({RUNS} - n) * 1000000")),
            text("n % 3"),
            text("n % 3"),
            at(&format!("{now} - ({RUNS} - n) * 1000000 + 3000")),
            at(&format!("{now} - ({RUNS} - n) * 1000000 + 250000")),
            repeat("x", 20_000),
            text("n"),
            series(RUNS)
        ),
        format!(
            "INSERT INTO {t}_audit (at, job, node, action, actor, why, detail) \
             SELECT {}, {}, NULL, CASE WHEN n % 2 = 0 THEN 'pause' ELSE 'resume' END, \
             'web:alice', 'maintenance <window> ' || {}, '' FROM {}",
            at(&format!("{now} - ({CONTROLS} - n) * 1000000")),
            name("n % 1000"),
            text("n"),
            series(CONTROLS)
        ),
    ]
}

/// The fill, then ten instances beating, each registering the handler and 100 jobs.
async fn run_fill(store: &dyn Store, conn: &DatabaseConnection, pg: bool) {
    for sql in fill(pg) {
        conn.execute_unprepared(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let controls = store.controls().unwrap();
    let started_at = store.now().await.unwrap();
    for i in 0..INSTANCES {
        let node = format!("node-{i}");
        let beat = Heartbeat {
            node: node.clone(),
            version: "1.0.0".to_owned(),
            started_at,
            every: Duration::from_secs(if i % 3 == 2 { 0 } else { 600 }),
        };
        controls.heartbeat(&beat).await.unwrap();
        controls
            .register_handlers(&node, &["report".to_owned()])
            .await
            .unwrap();
        let jobs: Vec<String> = (0..100)
            .map(|j| format!("report-{:06}", i * 100 + j))
            .collect();
        controls.register_jobs(&node, &jobs).await.unwrap();
    }
    conn.execute_unprepared("ANALYZE").await.unwrap();
}

fn routers<S: Store + Clone>(store: S) -> Apps {
    let dashboard = |store| Dashboard::new(store).node("bench").page_size(PAGE);
    Apps {
        kept: dashboard(store.clone()).router(),
        read: dashboard(store).counts_max_age(Duration::ZERO).router(),
    }
}

/// GETs `path`: its status and body size.
async fn get(app: &Router, path: &str) -> (StatusCode, usize, String) {
    let req = Request::get(path).body(Body::empty()).unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    let head = String::from_utf8_lossy(&body[..body.len().min(2000)]).into_owned();
    (status, body.len(), head)
}

/// The dashboards of one store: the default one, and one that reads the header's
/// counts on every page.
struct Apps {
    kept: Router,
    read: Router,
}

fn measure(c: &mut Criterion, rt: &tokio::runtime::Runtime, db: &str, apps: &Apps, raw: Raw) {
    let raw = tokio::sync::Mutex::new(raw);
    let mut group = c.benchmark_group(format!("dashboard_pages/{db}"));
    for case in cases(db == "postgres") {
        let app = if case.counts_read {
            &apps.read
        } else {
            &apps.kept
        };
        let (status, bytes, head) = rt.block_on(get(app, &case.path));
        assert_eq!(status, StatusCode::OK, "{db} {}: {head}", case.path);
        let mut page_total = Duration::ZERO;
        let mut raw_total = Duration::ZERO;
        let mut n = 0u64;
        group.bench_function(case.label, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut ours = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        let (_, len, _) = get(app, &case.path).await;
                        ours += t.elapsed();
                        assert!(
                            len.abs_diff(bytes) < bytes / 10 + 1000,
                            "{len} bytes, first {bytes}"
                        );
                        let t = Instant::now();
                        raw.lock().await.run(&case.sql, case.arg.as_deref()).await;
                        raw_total += t.elapsed();
                    }
                    page_total += ours;
                    n += iters;
                    ours
                })
            })
        });
        let n32 = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        ROWS.lock().unwrap().push((
            db.to_owned(),
            case.label.to_owned(),
            case.path.clone(),
            page_total / n32,
            bytes,
            raw_total / n32,
        ));
    }
    group.finish();
}

fn pages(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    // SQLite, in a file of a temporary directory.
    let dir = std::env::temp_dir().join(format!("dashboard-pages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bench.db");
    let (apps, raw) = rt.block_on(async {
        let store = SqliteStore::open(&path, SqliteOptions::default())
            .await
            .unwrap();
        scheduler_sqlite::RunHistory::new(&store, scheduler_sqlite::HistoryOptions::default())
            .await
            .unwrap();
        let t = Instant::now();
        run_fill(&store, store.connection(), false).await;
        println!("sqlite: filled in {:.1} s", t.elapsed().as_secs_f64());
        let raw = SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        (routers(Arc::new(store)), Raw::Sqlite(raw))
    });
    measure(c, &rt, "sqlite", &apps, raw);

    // PostgreSQL.
    let url = rt.block_on(database());
    let (apps, raw) = rt.block_on(async {
        let store = PostgresStore::connect(&url, PostgresOptions::default())
            .await
            .unwrap();
        scheduler_postgres::RunHistory::new(&store, scheduler_postgres::HistoryOptions::default())
            .await
            .unwrap();
        let t = Instant::now();
        run_fill(&store, store.connection(), true).await;
        println!("postgres: filled in {:.1} s", t.elapsed().as_secs_f64());
        let raw = PgConnection::connect(&url).await.unwrap();
        (routers(Arc::new(store)), Raw::Postgres(raw))
    });
    measure(c, &rt, "postgres", &apps, raw);
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "\n{:<9} {:<26} {:>10} {:>10} {:>10} {:>8}  path",
        "database", "page", "page", "bytes", "raw SQL", "ratio"
    );
    for (db, label, path, page, bytes, raw) in ROWS.lock().unwrap().iter() {
        let flag = match (*page > SLOW, *bytes > HEAVY) {
            (true, true) => "  over 50 ms and 200 KB",
            (true, false) => "  over 50 ms",
            (false, true) => "  over 200 KB",
            _ => "",
        };
        println!(
            "{db:<9} {label:<26} {:>8.2}ms {bytes:>10} {:>8.3}ms {:>7.1}×  {path}{flag}",
            page.as_secs_f64() * 1e3,
            raw.as_secs_f64() * 1e3,
            page.as_secs_f64() / raw.as_secs_f64().max(1e-9),
        );
    }
    println!(
        "({SCHEDULES} schedules, {LEASES} leases, {RUNS} runs, {CONTROLS} controls, \
         {INSTANCES} instances; pages of \
         {PAGE}; raw SQL: the page's list query and count, plain sqlx, same database, same run)\n"
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = pages
}
criterion_main!(benches);
