//! The CLI's error type: every message says what to do, and its exit code.

use std::path::PathBuf;

use scheduler_core::TriggerId;

/// The exit code of a request the store refused: a dynamic schedule whose handler
/// no instance registered, a control that cannot be applied, a trigger of a paused
/// job without `--while-paused`.
pub const EXIT_REFUSED: u8 = 5;

/// The exit code of a command line that does not parse, as clap reports it; also
/// of a dynamic schedule that does not check (`schedules put`), and of input past
/// the store's limits (a `--why` or `--by` over 1 KiB, an empty `--by`, an `--every`
/// period below the minimum).
pub const EXIT_USAGE: u8 = 2;

/// Everything that can stop a command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither `--database-url` nor `DATABASE_URL` was given.
    #[error("no database URL: pass --database-url or set DATABASE_URL")]
    NoUrl,
    /// The URL does not parse or the server cannot be reached.
    #[error("{0}")]
    Connect(scheduler_postgres::Error),
    /// A `sqlite:` URL that names no file the store can open.
    #[error("bad SQLite URL {url:?}: {reason}")]
    BadSqliteUrl {
        /// The URL given.
        url: String,
        /// What is wrong, and what to write instead.
        reason: &'static str,
    },
    /// A `sqlite:` URL naming a file that does not exist.
    #[error(
        "no SQLite database at {}: give the path of the file the app opens (this tool never creates one)",
        .path.display()
    )]
    NoSqliteFile {
        /// The file looked for.
        path: PathBuf,
    },
    /// The SQLite file could not be opened.
    #[error("{0}")]
    OpenSqlite(scheduler_sqlite::Error),
    /// A command that reads PostgreSQL's own tables, asked of a SQLite file.
    #[error(
        "`{command}` works on PostgreSQL only, and {} is a SQLite file; `history` and \
         `schedules list` work on both",
        .path.display()
    )]
    PostgresOnly {
        /// The command.
        command: &'static str,
        /// The SQLite file.
        path: PathBuf,
    },
    /// The store keeps no controls.
    #[error("this store keeps no controls (pause, resume, trigger, dynamic schedules)")]
    NoControls,
    /// A control failed, or the store refused it ([`Error::exit_code`] tells which).
    #[error("{0}")]
    Control(scheduler_core::Error),
    /// A dynamic schedule that does not check, refused before the store is opened.
    #[error("{0}")]
    BadSchedule(scheduler_core::Error),
    /// `schedules import` of a file that cannot be read, or is not rows of schedules.
    #[error("cannot import {file}: {reason}")]
    BadImport {
        /// The file as given (`-`: standard input).
        file: String,
        /// Why, in words.
        reason: String,
    },
    /// `pause`, `resume` or `trigger` of a job the store does not know, without
    /// `--force`.
    #[error("no instance knows a job named {job:?}{hint}")]
    UnknownJob {
        /// The job asked for.
        job: String,
        /// The closest known name, or the names known, and `--force`.
        hint: String,
    },
    /// The jobs the store knows could not be read (a lease table whose migrations
    /// an older version ran?).
    #[error(
        "cannot tell whether an instance knows a job named {job:?}: {cause}; pass --force to \
         act on it all the same"
    )]
    CannotCheckJob {
        /// The job asked for.
        job: String,
        /// Why the store could not say.
        cause: scheduler_core::Error,
    },
    /// A database URL of a scheme this tool does not read.
    #[error(
        "the database URL's scheme {scheme}: is not one this tool reads: write \
         postgres://user@host/DBNAME for PostgreSQL, or sqlite:///path/to/app.db (or the \
         file's path) for SQLite"
    )]
    UnsupportedUrl {
        /// The scheme given (the rest of the URL, which may hold a password, is not
        /// repeated).
        scheme: String,
    },
    /// `trigger-status` of an id the store does not know.
    #[error("no trigger {id}: `history` lists the triggers asked for (their id is the detail)")]
    NoSuchTrigger {
        /// The id asked for.
        id: TriggerId,
    },
    /// The database has no lease table of that name.
    #[error(
        "no lease table `{table}` here: has the scheduler run against this database? (--table)"
    )]
    NoLeaseTable {
        /// The table looked for.
        table: String,
    },
    /// A query failed. The message names the query and says what to do.
    #[error("{0}")]
    Query(scheduler_postgres::Error),
    /// A row did not have the expected shape (a table altered by hand?).
    #[error("{0}")]
    BadRow(scheduler_postgres::Error),
    /// `backfill` asked of this tool, which has the lease table but not the app's jobs.
    #[error(
        "backfill runs job {job:?}'s own code, which lives in your app, not in this tool: mount \
         scheduler_cli::BackfillArgs in your app's command line and call scheduler_cli::backfill \
         with its scheduler's backfiller (see the README's Backfill section); nothing was run"
    )]
    BackfillOutsideApp {
        /// The job asked for.
        job: String,
    },
    /// The backfill was refused, or the store stayed unreachable.
    #[error("{0}")]
    Backfill(scheduler_core::Error),
    /// The JSON output could not be written.
    #[error("cannot write the JSON output: {0}")]
    Json(serde_json::Error),
}

// Each message above is whole (it says its cause once), so none is also returned as
// a `source`: a report walking the chain would print it twice.

impl From<scheduler_postgres::Error> for Error {
    fn from(err: scheduler_postgres::Error) -> Self {
        Error::Connect(err)
    }
}

impl From<scheduler_core::Error> for Error {
    fn from(err: scheduler_core::Error) -> Self {
        Error::Control(err)
    }
}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Error::Json(err)
    }
}

impl Error {
    /// The process's exit code for this error: [`EXIT_USAGE`] for a dynamic schedule
    /// that does not check or input past the store's limits
    /// ([`InvalidInput`](scheduler_core::Error::InvalidInput)), [`EXIT_REFUSED`] for a
    /// control the store refused (an unknown handler, a bad name or policy, a trigger
    /// of a paused job not said to run while paused),
    /// [`EXIT_MISSING`](crate::EXIT_MISSING) for no such trigger or job, 1 for any
    /// other.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::BadSchedule(_) | Error::BadImport { .. } => EXIT_USAGE,
            Error::NoSuchTrigger { .. } | Error::UnknownJob { .. } => crate::EXIT_MISSING,
            Error::Control(err) => control_exit_code(err),
            _ => 1,
        }
    }

    /// The error of a `scheduler_postgres::diagnostics` read: a failed statement is a
    /// [`Error::Query`], a row it could not read a [`Error::BadRow`].
    pub(crate) fn read(err: scheduler_postgres::Error) -> Self {
        match err {
            scheduler_postgres::Error::Statement { .. } => Error::Query(err),
            scheduler_postgres::Error::BadRow { .. } => Error::BadRow(err),
            other => Error::Connect(other),
        }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The exit code of a control the store refused: a row of a batch's is its own
/// (`schedules import`).
fn control_exit_code(err: &scheduler_core::Error) -> u8 {
    use scheduler_core::Error as Core;
    match err {
        Core::InvalidInput { .. } => EXIT_USAGE,
        Core::InvalidControl { .. }
        | Core::UnknownHandler { .. }
        | Core::InvalidName { .. }
        | Core::InvalidSchedule { .. }
        | Core::InvalidTiming { .. }
        | Core::TriggerWhilePaused { .. } => EXIT_REFUSED,
        Core::InBatch { cause, .. } => control_exit_code(cause),
        _ => 1,
    }
}
