//! The lease table is the same table on PostgreSQL and on SQLite: each store creates
//! it with its own migrations (`scheduler_migrations`, one dialect each), and the
//! two catalogs then agree column by column — name and order, type family, nullability,
//! primary key — and on the named CHECK constraints.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use scheduler_postgres::{PostgresOptions, PostgresStore};
use scheduler_sqlite::{SqliteOptions, SqliteStore};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use test_postgres::TestDb;

/// What a column holds, whichever way a dialect spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Text,
    Timestamp,
    Integer,
    Boolean,
}

impl Family {
    /// The family of a PostgreSQL type, as `format_type` spells it.
    fn of_postgres(column: &str, ty: &str) -> Self {
        match ty {
            "text" => Self::Text,
            "timestamp with time zone" => Self::Timestamp,
            "bigint" => Self::Integer,
            "boolean" => Self::Boolean,
            other => panic!(
                "column {column} has PostgreSQL type {other}: give it a family and its SQLite type here"
            ),
        }
    }

    /// How SQLite stores this family. SQLite has no time or boolean type: the store
    /// keeps times as integer microseconds since the Unix epoch, on SQLite's clock,
    /// and booleans as 0 or 1.
    fn sqlite_type(self) -> &'static str {
        match self {
            Self::Text => "TEXT",
            Self::Timestamp | Self::Integer | Self::Boolean => "INTEGER",
        }
    }
}

/// One column as SQLite declares it (`pragma_table_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    name: String,
    ty: String,
    not_null: bool,
    primary_key: bool,
}

/// The lease table's columns on PostgreSQL, in order, with their families.
async fn postgres_columns(conn: &DatabaseConnection, table: &str) -> Vec<(Column, Family)> {
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS ty, \
                    a.attnotnull AS not_null, \
                    coalesce(a.attnum = ANY(i.indkey::int2[]), false) AS primary_key \
             FROM pg_attribute a \
             LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            [format!("\"{table}\"").into()],
        ))
        .await
        .expect("read pg_attribute");
    rows.iter()
        .map(|row| {
            let name: String = row.try_get("", "name").unwrap();
            let ty: String = row.try_get("", "ty").unwrap();
            let family = Family::of_postgres(&name, &ty);
            let column = Column {
                name,
                ty,
                not_null: row.try_get("", "not_null").unwrap(),
                primary_key: row.try_get("", "primary_key").unwrap(),
            };
            (column, family)
        })
        .collect()
}

/// The lease table's columns on SQLite, in order.
async fn sqlite_columns(conn: &DatabaseConnection, table: &str) -> Vec<Column> {
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Sqlite,
            "SELECT name, type AS ty, \"notnull\" AS not_null, pk FROM pragma_table_info(?1) ORDER BY cid",
            [table.into()],
        ))
        .await
        .expect("read pragma_table_info");
    rows.iter()
        .map(|row| Column {
            name: row.try_get("", "name").unwrap(),
            ty: row.try_get("", "ty").unwrap(),
            not_null: row.try_get::<i64>("", "not_null").unwrap() != 0,
            primary_key: row.try_get::<i64>("", "pk").unwrap() != 0,
        })
        .collect()
}

/// The names of the table's CHECK constraints on PostgreSQL, sorted.
async fn postgres_checks(conn: &DatabaseConnection, table: &str) -> Vec<String> {
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT conname::text AS name FROM pg_constraint \
             WHERE conrelid = to_regclass($1) AND contype = 'c' ORDER BY conname",
            [format!("\"{table}\"").into()],
        ))
        .await
        .expect("read pg_constraint");
    rows.iter()
        .map(|row| row.try_get("", "name").unwrap())
        .collect()
}

/// The table's `CREATE TABLE` statement as SQLite keeps it.
async fn sqlite_definition(conn: &DatabaseConnection, table: &str) -> String {
    conn.query_one_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [table.into()],
    ))
    .await
    .expect("read sqlite_schema")
    .expect("the lease table exists on SQLite")
    .try_get("", "sql")
    .unwrap()
}

/// A database file path unique to this test, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        Self(std::env::temp_dir().join(format!(
            "scheduler-schema-matches-{}-{}-{nanos}.db",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst),
        )))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_table_has_the_same_columns_in_both_dialects() {
    let db = TestDb::new().await;
    let pg_conn = test_postgres::inspect(db.url()).await;
    for table in ["scheduler_leases", "app_leases"] {
        let pg = PostgresStore::connect(db.url(), PostgresOptions::default().table(table).unwrap())
            .await
            .expect("the PostgreSQL store opens and migrates");
        let file = TempFile::new();
        let lite = SqliteStore::open(&file.0, SqliteOptions::default().table(table).unwrap())
            .await
            .expect("the SQLite store opens and migrates");

        let postgres = postgres_columns(&pg_conn, table).await;
        let sqlite = sqlite_columns(lite.connection(), table).await;
        let names: Vec<&str> = postgres.iter().map(|(c, _)| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "name",
                "holder",
                "tick",
                "token",
                "taken_at",
                "expires_at",
                "released_at",
                "cancel_tick"
            ],
            "{table} on PostgreSQL"
        );
        // PostgreSQL's columns, spelled the way SQLite must declare them.
        let expected: Vec<Column> = postgres
            .iter()
            .map(|(column, family)| Column {
                ty: family.sqlite_type().to_owned(),
                ..column.clone()
            })
            .collect();
        for (at, (want, got)) in expected.iter().zip(&sqlite).enumerate() {
            assert_eq!(got, want, "{table}, column {at}: SQLite vs PostgreSQL");
        }
        assert_eq!(sqlite.len(), expected.len(), "{table}: {sqlite:#?}");
        // Exactly one primary key column, the lease name, on both.
        assert_eq!(
            sqlite
                .iter()
                .filter(|c| c.primary_key)
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["name"]
        );
        assert_eq!(
            postgres
                .iter()
                .filter(|(_, f)| *f == Family::Timestamp)
                .count(),
            5,
            "tick, taken_at, expires_at, released_at, cancel_tick are times"
        );

        // The same named CHECK constraints.
        let checks = postgres_checks(&pg_conn, table).await;
        assert_eq!(checks, [format!("{table}_token_positive")]);
        let definition = sqlite_definition(lite.connection(), table).await;
        for check in &checks {
            assert!(
                definition.contains(&format!("CONSTRAINT \"{check}\" CHECK (token > 0)")),
                "{table} on SQLite lacks {check}: {definition}"
            );
        }

        drop(pg);
        lite.close().await.expect("close the SQLite store");
    }
}
