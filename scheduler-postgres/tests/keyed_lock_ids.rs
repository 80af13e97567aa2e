#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The advisory locks a chunk takes are exactly the server's `hashtextextended(key, 0)`
//! of its keys (or their stripes), whoever computes them: the client, in a UTF-8
//! database, or the server, in a database whose text the client cannot hash as the
//! server does (LATIN1: `é` is one byte there, two in UTF-8). Read from `pg_locks` by
//! the work itself, while its transaction holds them.

use std::collections::BTreeSet;

use scheduler_postgres::{KeyedOptions, PostgresOptions, PostgresStore};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement};
use test_postgres::TestDb;

/// Keys of every length from 0 to 40 bytes and non-ASCII text that LATIN1 holds too.
fn keys() -> Vec<String> {
    let mut keys: Vec<String> = (0..=40).map(|n| "k".repeat(n)).collect();
    keys.extend(["é", "ünïcödé", "ñ-01234567890", "Ærø ½ ß"].map(str::to_owned));
    keys.extend((0..100).map(|i| format!("event-{i:04}-ü")));
    keys
}

/// The server's lock ids of `keys`, folded into `stripes` if given.
async fn server_ids(
    conn: &DatabaseConnection,
    keys: &[String],
    stripes: Option<u32>,
) -> BTreeSet<i64> {
    let n = i64::from(stripes.unwrap_or(0));
    conn.query_all_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT DISTINCT CASE WHEN $2 = 0 THEN hashtextextended(k, 0) \
                ELSE (hashtextextended(k, 0) % $2 + $2) % $2 END AS id \
         FROM unnest($1::text[]) AS k",
        [keys.to_vec().into(), n.into()],
    ))
    .await
    .expect("server ids")
    .iter()
    .map(|row| row.try_get::<i64>("", "id"))
    .collect::<Result<_, DbErr>>()
    .expect("ids")
}

/// The advisory locks a keyed chunk holds while its work runs, as lock ids (the
/// single-`bigint` form) or stripes (the two-`int4` form's second key).
async fn held_in_work(
    store: &PostgresStore,
    keys: &[String],
    options: KeyedOptions,
) -> BTreeSet<i64> {
    let striped = options.stripes.is_some();
    let done = store
        .keyed(options)
        .process(keys, move |txn, _chunk| {
            Box::pin(async move {
                let sql = if striped {
                    "SELECT objid::int8 AS id FROM pg_locks WHERE locktype = 'advisory' \
                     AND objsubid = 2 AND granted AND pid = pg_backend_pid()"
                } else {
                    // A bigint advisory lock shows as classid (high 32 bits), objid (low).
                    "SELECT (classid::int8 << 32) | objid::int8 AS id FROM pg_locks \
                     WHERE locktype = 'advisory' AND objsubid = 1 AND granted \
                     AND pid = pg_backend_pid()"
                };
                txn.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
                    .await?
                    .iter()
                    .map(|row| row.try_get::<i64>("", "id"))
                    .collect::<Result<BTreeSet<i64>, DbErr>>()
            })
        })
        .await
        .expect("process");
    assert_eq!(done.values.len(), 1, "one transaction");
    let held = done.values.into_iter().next().unwrap();
    assert_eq!(done.locks, held.len() as u64, "locks counts what was taken");
    held
}

async fn check(url: &str) {
    let store = PostgresStore::connect(url, PostgresOptions::default().max_connections(2))
        .await
        .expect("connect");
    let conn = test_postgres::inspect(url).await;
    let keys = keys();
    assert_eq!(
        held_in_work(&store, &keys, KeyedOptions::default()).await,
        server_ids(&conn, &keys, None).await,
        "per-key locks"
    );
    assert_eq!(
        held_in_work(&store, &keys, KeyedOptions::default().stripes(7)).await,
        server_ids(&conn, &keys, Some(7)).await,
        "stripes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_ids_are_the_servers_in_a_utf8_database() {
    let db = TestDb::new().await;
    check(db.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_ids_are_the_servers_in_a_latin1_database() {
    let db = TestDb::new().await;
    let name = format!("{}_latin1", db.name());
    let admin = test_postgres::inspect(db.direct_url()).await;
    admin
        .execute_unprepared(&format!(
            "CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        ))
        .await
        .expect("create a LATIN1 database");
    let (base, query) = db
        .direct_url()
        .split_once('?')
        .map_or((db.direct_url(), ""), |(base, query)| (base, query));
    let (server, _) = base.rsplit_once('/').expect("a database in the URL");
    let url = if query.is_empty() {
        format!("{server}/{name}")
    } else {
        format!("{server}/{name}?{query}")
    };
    check(&url).await;
}
