//! The crate's error type. `sea_orm::DbErr` is mapped here, once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sea_orm::{DbErr, RuntimeErr};

/// Everything that can go wrong in the SQLite store.
///
/// Each message is whole: it says the driver's error once, followed by what to do,
/// so `{err}` in a log line is enough. The driver's error is a field, not a
/// [`source`](std::error::Error::source): a report walking the chain would print it
/// a second time.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lease table name is not a plain identifier, or is schema-qualified
    /// (SQLite has no schemas).
    #[error(transparent)]
    InvalidTableName(#[from] scheduler_migrations::InvalidTableName),
    /// The path cannot name a database file the store's pool can share.
    #[error("invalid database path {path:?}: {reason}")]
    InvalidPath {
        /// The path given.
        path: PathBuf,
        /// Why it was refused, and what to do.
        reason: &'static str,
    },
    /// The directory of the database file does not exist. SQLite creates the file,
    /// never its directory.
    #[error(
        "cannot open database {}: the directory {} does not exist; create it first or choose another path",
        .path.display(),
        .directory.display()
    )]
    MissingDirectory {
        /// The database file asked for.
        path: PathBuf,
        /// Its missing directory.
        directory: PathBuf,
    },
    /// SQLite could not open the file as a database.
    #[error("cannot open database {}: {}{hint}", .path.display(), describe(.cause))]
    Open {
        /// The database file.
        path: PathBuf,
        /// The driver's error.
        cause: DbErr,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// A write was refused because the database is read-only: the store was opened
    /// with [`SqliteOptions::read_only`](crate::SqliteOptions::read_only), or the
    /// file or its directory is not writable by this process.
    #[error("cannot {operation}: database {} is read-only ({}); {hint}", .path.display(), describe(.cause))]
    ReadOnly {
        /// What the statement was for (`take leases`, `create the lease table`, …).
        operation: &'static str,
        /// The database file.
        path: PathBuf,
        /// The driver's error.
        cause: DbErr,
        /// Why it is read-only, as far as the store knows.
        hint: &'static str,
    },
    /// Another connection (most likely another process) kept the database locked for
    /// longer than the busy timeout. Nothing was written.
    #[error(
        "cannot {operation}: database {} stayed locked by another connection for longer than the busy timeout ({busy_timeout:?}); \
         find the process holding a long write transaction on it, or raise the timeout with SqliteOptions::busy_timeout",
        .path.display()
    )]
    Busy {
        /// What the statement was for.
        operation: &'static str,
        /// The database file.
        path: PathBuf,
        /// How long the statement waited for the lock.
        busy_timeout: Duration,
        /// The driver's error; `None` when the store's own earlier writes, each
        /// waiting for the lock, kept this one waiting for longer than the busy
        /// timeout.
        cause: Option<DbErr>,
    },
    /// The SQLite library linked in is too old for the store's statements.
    #[error(
        "SQLite {version} is too old: the lease store needs {required} or later (RETURNING, STRICT tables, JSON operators); \
         use the SQLite bundled with sea-orm's sqlx-sqlite driver"
    )]
    UnsupportedSqlite {
        /// The version found.
        version: String,
        /// The oldest version that works.
        required: &'static str,
    },
    /// The database could not be switched to write-ahead logging, which the store
    /// needs so that readers never wait for a writer.
    #[error(
        "cannot put database {} in WAL journal mode (SQLite kept {mode:?}); WAL needs a local file system with shared memory: \
         keep the database off network shares",
        .path.display()
    )]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite kept.
        mode: String,
    },
    /// Creating or upgrading the schema failed. Nothing of it was applied (the
    /// migrations run in one transaction).
    #[error("migration {migration} failed: {}", describe(.cause))]
    Migrate {
        /// The migration's name.
        migration: String,
        /// The driver's error.
        cause: DbErr,
    },
    /// A statement failed.
    #[error("{operation} failed: {}", describe(.cause))]
    Statement {
        /// What the statement was for (`take leases`, `renew leases`, …).
        operation: &'static str,
        /// The driver's error.
        cause: DbErr,
    },
    /// A row of the lease table does not have the expected shape (altered by hand?).
    #[error(
        "unexpected row in the lease table while trying to {operation}: {}; was the table altered by hand?",
        describe(.cause)
    )]
    BadRow {
        /// What the statement was for.
        operation: &'static str,
        /// The decoding error.
        cause: DbErr,
    },
    /// Invalid input, as `scheduler-core` reports it.
    #[error(transparent)]
    Core(#[from] scheduler_core::Error),
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for scheduler_core::Error {
    fn from(err: Error) -> Self {
        match err {
            Error::Core(err) => err,
            Error::ReadOnly { .. } => {
                scheduler_core::Error::store_as(scheduler_core::StoreFailure::ReadOnly, err)
            }
            other => scheduler_core::Error::store(other),
        }
    }
}

/// SQLite's primary result codes that get variants of their own.
/// (SQLite's documentation, "Result and Error Codes").
const SQLITE_BUSY: i32 = 5;
const SQLITE_READONLY: i32 = 8;
const SQLITE_CANTOPEN: i32 = 14;
const SQLITE_NOTADB: i32 = 26;

/// The database a store opened, and how: what error messages need to name.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) path: PathBuf,
    pub(crate) busy_timeout: Duration,
    pub(crate) read_only: bool,
}

impl Origin {
    /// Maps a driver error met while trying to `operation`: a lock held beyond the
    /// busy timeout, a read-only database and a file SQLite cannot open get variants
    /// of their own; any other error is handed to `other`.
    pub(crate) fn error(
        &self,
        operation: &'static str,
        source: DbErr,
        other: impl FnOnce(DbErr) -> Error,
    ) -> Error {
        match sqlite_code(&source).map(|code| code & 0xff) {
            Some(SQLITE_BUSY) => Error::Busy {
                operation,
                path: self.path.clone(),
                busy_timeout: self.busy_timeout,
                cause: Some(source),
            },
            Some(SQLITE_READONLY) => Error::ReadOnly {
                operation,
                path: self.path.clone(),
                cause: source,
                hint: if self.read_only {
                    "the store was opened with SqliteOptions::read_only(true); open it without that option to write"
                } else {
                    "make the file and its directory writable by this process (SQLite also writes the -wal and -shm files beside it)"
                },
            },
            Some(SQLITE_CANTOPEN) => Error::Open {
                path: self.path.clone(),
                cause: source,
                hint: cannot_open_hint(&self.path, self.read_only),
            },
            Some(SQLITE_NOTADB) => Error::Open {
                path: self.path.clone(),
                cause: source,
                hint: "; the file is not a SQLite database (or is encrypted): point the store at a new file or an existing SQLite database",
            },
            _ => other(source),
        }
    }

    /// Maps a driver error of a lease statement.
    pub(crate) fn statement_error(&self, operation: &'static str, source: DbErr) -> Error {
        self.error(operation, source, |source| Error::Statement {
            operation,
            cause: source,
        })
    }
}

/// Why SQLite may have failed to open `path`, judged from the file system.
fn cannot_open_hint(path: &Path, read_only: bool) -> &'static str {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => "; the path is a directory: name a database file inside it",
        Ok(_) => {
            "; check that the file and its directory are readable and writable by this process \
             (SQLite also creates the -wal and -shm files beside it)"
        }
        Err(_) if read_only => {
            "; the file does not exist, and a read-only store does not create it: open it once without read_only"
        }
        Err(_) => {
            "; the file does not exist and could not be created: its directory is read-only for this process \
             (make it writable, or choose another directory)"
        }
    }
}

/// Whether SQLite reported the database locked (`SQLITE_BUSY`, any extended code).
pub(crate) fn is_busy(err: &DbErr) -> bool {
    sqlite_code(err).is_some_and(|code| code & 0xff == SQLITE_BUSY)
}

/// A driver error in words, once: SQLite's message and result code, without
/// sea-orm's variant prefix.
pub(crate) fn describe(err: &DbErr) -> String {
    match err {
        DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e))
        | DbErr::Conn(RuntimeErr::SqlxError(e)) => match &**e {
            sea_orm::sqlx::Error::Database(db) => match db.code() {
                Some(code) => format!("{} [SQLite code {code}]", db.message()),
                None => db.message().to_owned(),
            },
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}

/// Wraps an error the sqlx pool returned while connecting as sea-orm would.
pub(crate) fn connect_error(err: sea_orm::sqlx::Error) -> DbErr {
    DbErr::Conn(RuntimeErr::SqlxError(err.into()))
}

/// SQLite's extended result code of a database error, if the error came from SQLite.
fn sqlite_code(err: &DbErr) -> Option<i32> {
    match err {
        DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e))
        | DbErr::Conn(RuntimeErr::SqlxError(e)) => match &**e {
            sea_orm::sqlx::Error::Database(db) => db.code()?.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}
