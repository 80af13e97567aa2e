#![allow(clippy::expect_used)]
//! A renewal writes its update and nothing more: at most 90 bytes of WAL per renewed
//! lease (a HOT update of the row is about 72; the rest is page pruning and the
//! commit). Locking the rows first (`SELECT … FOR UPDATE`) wrote a lock record for
//! each before its update: about 137 bytes per lease.
//!
//! WAL is the server's, shared by every database on it, so this file holds this one
//! test (its own server); the smallest of a few measurements counts, as a checkpoint
//! meanwhile (whose first change to each page logs the whole page) only ever adds.

use std::time::Duration;

use scheduler_core::{LeaseName, Store, TakeRequest, Tick, Ttl};
use scheduler_postgres::{PostgresOptions, PostgresStore};
use sea_orm::sqlx::{self, Connection, Executor, PgConnection};
use test_postgres::TestDb;

const LEASES: usize = 1000;
const MAX_BYTES_PER_LEASE: u64 = 90;

async fn wal_position(conn: &mut PgConnection) -> String {
    sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(conn)
        .await
        .expect("wal position")
}

async fn wal_bytes(conn: &mut PgConnection, from: &str, to: &str) -> u64 {
    let bytes: i64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::int8")
        .bind(to)
        .bind(from)
        .fetch_one(conn)
        .await
        .expect("wal bytes");
    u64::try_from(bytes).expect("the WAL only grows")
}

#[tokio::test]
async fn a_renewal_writes_at_most_90_bytes_of_wal_per_lease() {
    let db = TestDb::new().await;
    let store = PostgresStore::connect(db.url(), PostgresOptions::default())
        .await
        .expect("connect");
    let mut conn = PgConnection::connect(&test_postgres::direct_url(db.url()))
        .await
        .expect("connect to inspect");
    let ttl = Ttl::new(Duration::from_secs(600)).expect("ttl");
    let tick = Tick::new(store.now().await.expect("clock"));
    let requests: Vec<_> = (0..LEASES)
        .map(|i| TakeRequest::new(LeaseName::new(format!("wal-{i:04}")).expect("name"), tick))
        .collect();
    let won = store.take(&requests, ttl).await.expect("take").won;
    assert_eq!(won.len(), LEASES);
    let keys: Vec<_> = won.iter().map(|l| l.key()).collect();
    // A checkpoint now (if this role may ask for one) and a renewal after it: the
    // pages' first changes since, logged whole, are behind us.
    let _ = conn.execute("CHECKPOINT").await;
    assert_eq!(store.renew(&keys, ttl).await.expect("renew").len(), LEASES);

    let mut fewest = u64::MAX;
    for _ in 0..3 {
        let before = wal_position(&mut conn).await;
        let renewed = store.renew(&keys, ttl).await.expect("renew");
        let after = wal_position(&mut conn).await;
        assert_eq!(renewed.len(), LEASES);
        fewest = fewest.min(wal_bytes(&mut conn, &before, &after).await);
        if fewest <= MAX_BYTES_PER_LEASE * LEASES as u64 {
            break;
        }
    }
    let per_lease = fewest as f64 / LEASES as f64;
    eprintln!("a renewal of {LEASES} leases wrote {fewest} bytes of WAL: {per_lease:.1} per lease");
    assert!(
        fewest <= MAX_BYTES_PER_LEASE * LEASES as u64,
        "a renewal of {LEASES} leases wrote {per_lease:.1} bytes of WAL per lease (at most {MAX_BYTES_PER_LEASE})"
    );
}
