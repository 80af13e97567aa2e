//! Names that look like SQL, quotes, Unicode and names at the length limit run
//! through the whole runtime and are stored byte for byte; names over the limit or
//! with control characters, and table names that are not plain identifiers, are
//! refused with a clear error before any SQL.
//!
//! `pgbouncer.rs` runs these tests again through PgBouncer in transaction pooling
//! mode: the stores under test connect to `db.url()`, while the tests' own set-up and
//! inspection statements go to the server directly (`admin`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scheduler_core::{LeaseName, Outcome, Release, Scheduler, Scope, Store};
use scheduler_postgres::{Error, PostgresOptions};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use support::hostile::{Logs, Named, admin, exists, store, strings, take, tick, ttl};
use support::wait_for;
use test_postgres::TestDb;
use tokio::sync::oneshot;
use tracing::instrument::WithSubscriber;

/// Whether a logged failure is a store call the loop gave up waiting for (the runtime's
/// call limit), rather than an error the store answered with.
fn abandoned(line: &str) -> bool {
    line.contains("did not answer") || line.contains("has not answered")
}

/// Names a careless store would splice into SQL, or mangle.
fn hostile_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "it's",
        "say \"hi\"",
        "back\\slash\\",
        "'; DROP TABLE scheduler_leases; --",
        "\"; DROP TABLE scheduler_leases; --",
        "$1",
        "$1::text); DELETE FROM scheduler_leases; --",
        "%s %d {} {0} ?",
        "/* comment */ -- comment",
        " ",
        "  ",
        "🦀 job 👨‍👩‍👧 (ZWJ family)",
        "مرحبا שלום (right to left)",
        "\u{202e}override right to left",
        // The same letter, composed and decomposed: two distinct names.
        "caf\u{e9}",
        "cafe\u{301}",
        "z\u{335}\u{30d}\u{34e}a\u{336}\u{33f}l\u{337}\u{352}go",
        "\u{feff}zero width no-break space\u{200b}",
    ]
    .map(str::to_owned)
    .to_vec();
    // Exactly 200 bytes: ASCII, two-byte and four-byte characters.
    names.push("x".repeat(200));
    names.push("ä".repeat(100));
    names.push("🦀".repeat(50));
    names.push(format!("'{}'", "\"".repeat(198)));
    for n in &names {
        assert!(n.len() <= LeaseName::MAX_LEN, "{n:?}");
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_job_names_run_and_are_stored_byte_for_byte() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let names = hostile_names();
    let node = "node '\"; DROP TABLE scheduler_leases; --";
    let per_node = "per-node job 'quoted'";
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let mut builder = Scheduler::builder(store.clone())
        .node_id(node)
        .lease_ttl(Duration::from_secs(2))
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(500));
    for n in &names {
        builder = builder.job(Named::new(n, &seen));
    }
    builder = builder.job(Named {
        scope: Scope::Node,
        ..Named::new(per_node, &seen)
    });
    let scheduler = builder.build().expect("hostile but valid names build");
    let stats = scheduler.stats();
    let logs = Logs::default();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(
        scheduler
            .run_until(async move {
                let _ = stopped.await;
            })
            .with_subscriber(logs.clone()),
    );
    let mut jobs = names.clone();
    jobs.push(per_node.to_owned());
    wait_for(Duration::from_secs(60), "every job to run twice", || {
        let done = jobs.iter().all(|j| stats.count(j, Outcome::Succeeded) >= 2);
        async move { done }
    })
    .await;
    stop.send(()).expect("scheduler running");
    run.await.expect("the scheduler does not panic");
    // No statement failed. (A store call abandoned because the store did not answer
    // in time says nothing about the names: a loaded machine makes those.)
    let failures: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("failed") && !abandoned(l))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");

    // The runs were handed, and the table holds, exactly these names, byte for byte.
    // (A lease name is the job's name, `job:node` for a node job, with `:` and `\\`
    // escaped: `LeaseName::for_job`.)
    let lease = |job: &str, scope| {
        LeaseName::for_job(job, scope, node)
            .expect("valid lease")
            .as_str()
            .to_owned()
    };
    let mut expected: BTreeSet<String> = names.iter().map(|n| lease(n, Scope::Cluster)).collect();
    expected.insert(lease(per_node, Scope::Node));
    assert_eq!(*seen.lock().unwrap(), expected);
    let conn = &admin(db.url()).await;
    let stored: BTreeSet<String> = strings(conn, "SELECT name FROM scheduler_leases")
        .await
        .into_iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(stored, expected);
    // Each row was released as completed (its statement found it by the exact name).
    let open = strings(
        conn,
        "SELECT name FROM scheduler_leases WHERE released_at IS NULL",
    )
    .await;
    assert!(open.is_empty(), "unreleased: {open:?}");
    assert!(exists(conn, "scheduler_leases").await);
    assert!(exists(conn, "scheduler_leases_migrations").await);
}

#[tokio::test]
async fn hostile_names_take_renew_and_release_through_the_store() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let names = hostile_names();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let t = tick(&store, 0).await;
    let keys = take(&store, &refs, t).await.expect("take");
    assert_eq!(keys.len(), names.len());
    let renewed = store.renew(&keys, ttl()).await.expect("renew");
    let renewed: BTreeSet<&str> = renewed.iter().map(|r| r.name.as_str()).collect();
    let released = store
        .release(&keys, Release::Completed)
        .await
        .expect("release");
    let released: BTreeSet<&str> = released.iter().map(LeaseName::as_str).collect();
    let expected: BTreeSet<&str> = refs.iter().copied().collect();
    assert_eq!(renewed, expected);
    assert_eq!(released, expected);
    // Byte lengths as PostgreSQL counts them: nothing was escaped or normalised.
    let admin = admin(db.url()).await;
    for n in &names {
        let row = admin
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT octet_length(name) AS len FROM scheduler_leases WHERE name = $1",
                [n.as_str().into()],
            ))
            .await
            .expect("query")
            .unwrap_or_else(|| panic!("no row for {n:?}"));
        assert_eq!(
            row.try_get::<i32>("", "len").expect("len") as usize,
            n.len(),
            "{n:?}"
        );
    }
}

#[tokio::test]
async fn names_over_the_limit_or_with_control_characters_are_refused_by_build() {
    let db = TestDb::new().await;
    let store = store(db.url()).await;
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let too_long = "a name must be at most 200 bytes long";
    let control = "a name must not contain control characters (NUL, newline, tab, …)";
    let cases = [
        ("x".repeat(201), too_long),
        // 199 ASCII bytes and a two-byte character: 201 bytes, 200 characters.
        (format!("{}é", "x".repeat(199)), too_long),
        ("🦀".repeat(51), too_long),
        (String::new(), "a name must not be empty"),
        ("nul\0byte".to_owned(), control),
        ("new\nline".to_owned(), control),
        ("tab\there".to_owned(), control),
        ("escape \u{1b}[31m red".to_owned(), control),
        ("delete \u{7f}".to_owned(), control),
        ("next line \u{85}".to_owned(), control),
    ];
    for (job, reason) in &cases {
        let err = Scheduler::builder(store.clone())
            .node_id("node-a")
            .job(Named::new(job, &seen))
            .build()
            .err();
        let Some(err @ scheduler_core::Error::InvalidName { .. }) = err else {
            panic!("{job:?} was not refused: {err:?}");
        };
        let shown: String = job.chars().take(64).collect();
        assert_eq!(err.to_string(), format!("invalid name {shown:?}: {reason}"));
        let err = LeaseName::new(job.clone()).expect_err("refused as a lease name too");
        assert_eq!(err.to_string(), format!("invalid name {shown:?}: {reason}"));
    }
    // A node job's lease is `job:node`: a name that fits alone can be too long with it.
    let err = Scheduler::builder(store.clone())
        .node_id("node-a")
        .job(Named {
            scope: Scope::Node,
            ..Named::new(&"n".repeat(195), &seen)
        })
        .build()
        .expect_err("refused");
    assert!(err.to_string().ends_with(too_long), "{err}");
    // And a node id is checked like a name.
    let err = Scheduler::builder(store.clone())
        .node_id("node\0a")
        .job(Named::new("fine", &seen))
        .build()
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        format!("invalid name \"node\\0a\": {control}")
    );
    // Nothing reached the database.
    assert!(
        strings(&admin(db.url()).await, "SELECT name FROM scheduler_leases")
            .await
            .is_empty()
    );
}

#[test]
fn hostile_table_names_are_refused_before_any_sql() {
    let cases = [
        (
            "x\"; drop",
            "a name part may only use lowercase letters, digits and `_`",
        ),
        (
            "leases; DROP TABLE x",
            "a name part may only use lowercase letters, digits and `_`",
        ),
        (
            "Leases",
            "a name part must start with a lowercase letter or `_`",
        ),
        (
            "lease's",
            "a name part may only use lowercase letters, digits and `_`",
        ),
        (
            "ünïcode",
            "a name part must start with a lowercase letter or `_`",
        ),
        (
            "a.b.c",
            "use `table` or `schema.table`, with at most one dot",
        ),
        ("", "a name part must not be empty"),
        ("public.", "a name part must not be empty"),
        (
            "x\0",
            "a name part may only use lowercase letters, digits and `_`",
        ),
    ];
    for (table, reason) in cases {
        let err = PostgresOptions::default().table(table).err();
        let Some(err @ Error::InvalidTableName(_)) = err else {
            panic!("{table:?} was accepted: {err:?}");
        };
        assert_eq!(
            err.to_string(),
            format!("invalid table name {table:?}: {reason}")
        );
    }
    let long = "a".repeat(53);
    let err = PostgresOptions::default()
        .table(&long)
        .expect_err("refused");
    assert!(
        err.to_string()
            .ends_with("the table part must be at most 52 characters long")
    );
}
