//! The checks a store makes when it opens a file: path, SQLite version, WAL mode, and
//! that the file can be written.

use std::path::{Path, PathBuf};
use std::time::Duration;

use scheduler_migrations::TableName;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, SqliteTransactionMode, Statement,
    TransactionOptions, TransactionTrait,
};

use crate::error::{Error, Origin, Result, is_busy};
use crate::row::get;

/// The oldest SQLite whose SQL the store uses: `RETURNING` (3.35), `STRICT` tables
/// (3.37), the `->>` operator (3.38).
pub(crate) const MIN_SQLITE: (u32, u32) = (3, 38);
/// Refuses paths SQLite would not treat as a file, and reports a missing directory
/// before SQLite reports "unable to open database file".
pub(crate) fn check_path(path: &Path) -> Result<()> {
    let refuse = |reason| {
        Err(Error::InvalidPath {
            path: path.to_owned(),
            reason,
        })
    };
    if path.as_os_str().is_empty() {
        return refuse("the path is empty; name a database file, such as scheduler.db");
    }
    if path.as_os_str() == ":memory:" {
        return refuse(
            "an in-memory database is private to one connection, so a pool cannot share its leases; \
             name a database file, or use scheduler_core::MemoryStore in tests",
        );
    }
    let directory = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    match std::fs::metadata(directory) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::MissingDirectory {
            path: path.to_owned(),
            directory: directory.to_owned(),
        }),
        // Anything else (not a directory, no permission) SQLite reports, and
        // `Origin::error` explains.
        _ => Ok(()),
    }
}

/// `path` as SQLite must see it to read it as a file name: SQLite is opened with URI
/// file names enabled, so a relative `file:…` gets a `./` in front.
pub(crate) fn literal_path(path: &Path) -> PathBuf {
    if path.is_relative() && path.as_os_str().as_encoded_bytes().starts_with(b"file:") {
        Path::new(".").join(path)
    } else {
        path.to_owned()
    }
}

/// Refuses a SQLite too old for the store's statements.
pub(crate) async fn check_version(db: &DatabaseConnection, origin: &Origin) -> Result<()> {
    const OP: &str = "read the SQLite version";
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT sqlite_version() AS version",
        ))
        .await
        .map_err(|source| origin.statement_error(OP, source))?;
    let version: String = match row {
        Some(row) => get(&row, "version", OP)?,
        None => String::new(),
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if found < MIN_SQLITE {
        return Err(Error::UnsupportedSqlite {
            version,
            required: "3.38",
        });
    }
    Ok(())
}

/// Puts the file in WAL journal mode (a lasting property of the file), so readers
/// never wait for the writer.
///
/// Switching needs an exclusive lock that SQLite's busy handler does not wait for, so
/// when processes open a new file at once, the losers retry here until the busy
/// timeout. Once the file is in WAL mode, this costs no lock at all.
pub(crate) async fn use_wal(db: &DatabaseConnection, origin: &Origin) -> Result<()> {
    const OP: &str = "switch the database to WAL journal mode";
    let deadline = tokio::time::Instant::now() + origin.busy_timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        let stmt = Statement::from_string(DbBackend::Sqlite, "PRAGMA journal_mode = WAL");
        match db.query_one_raw(stmt).await {
            Ok(row) => {
                let mode: String = match row {
                    Some(row) => row.try_get_by_index(0).map_err(|source| Error::BadRow {
                        operation: OP,
                        cause: source,
                    })?,
                    None => String::new(),
                };
                if mode.eq_ignore_ascii_case("wal") {
                    return Ok(());
                }
                return Err(Error::NoWal {
                    path: origin.path.clone(),
                    mode,
                });
            }
            Err(e) if is_busy(&e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(source) => return Err(origin.statement_error(OP, source)),
        }
    }
}

/// Makes sure SQLite can write the file.
///
/// SQLite opens a file this process may not write read-only, without a word, and in
/// WAL mode even `BEGIN IMMEDIATE` succeeds on it: only the first real write would
/// fail, and the runtime would retry that store failure forever. So one DDL statement
/// finds out at open, in a transaction that is rolled back: nothing is written.
/// (Checking from Rust by opening the file would be worse than useless: closing any
/// descriptor of the file drops every POSIX lock this process's connections hold on
/// it.)
pub(crate) async fn check_writable(
    db: &DatabaseConnection,
    table: &TableName,
    origin: &Origin,
) -> Result<()> {
    const OP: &str = "open the database for writing";
    let txn = db
        .begin_with_options(TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        })
        .await
        .map_err(|source| origin.statement_error(OP, source))?;
    let probe = format!("CREATE TABLE \"{}_write_probe\" (x INTEGER)", table.table());
    let probed = txn.execute_unprepared(&probe).await;
    txn.rollback()
        .await
        .map_err(|source| origin.statement_error(OP, source))?;
    match probed.map_err(|source| origin.statement_error(OP, source)) {
        Err(err @ (Error::ReadOnly { .. } | Error::Busy { .. })) => Err(err),
        // Any other failure (a table of that name exists, say) proves nothing either
        // way; the lease statements will report whatever is really wrong.
        Ok(_) | Err(_) => Ok(()),
    }
}
