//! Which store a URL names: PostgreSQL for `postgres://` and `postgresql://` URLs, a
//! SQLite file for `sqlite:` URLs and plain paths; any other scheme is refused.

use std::path::PathBuf;
use std::time::Duration;

use scheduler_core::{Controls, Store};
use scheduler_postgres::{PostgresOptions, PostgresStore, TableName};
use scheduler_sqlite::{SqliteOptions, SqliteStore};

use crate::error::{Error, Result};

/// The store the CLI opened: PostgreSQL, or one SQLite file.
///
/// Both are opened without migrations (the CLI never creates or alters a table) on
/// the lease table `--table`, whose control tables are named after it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Database {
    /// A PostgreSQL database, on a pool of one connection.
    Postgres(PostgresStore),
    /// A SQLite file.
    Sqlite(SqliteStore),
}

impl Database {
    /// Opens the store `url` names: the SQLite file [`sqlite_path`] reads, else
    /// PostgreSQL, waiting at most `timeout` for the server (or for SQLite's write
    /// lock).
    ///
    /// # Errors
    /// [`Error::UnsupportedUrl`] for another scheme; [`Error::BadSqliteUrl`],
    /// [`Error::NoSqliteFile`] or [`Error::OpenSqlite`] for a SQLite file;
    /// [`Error::Connect`] if a PostgreSQL URL does not parse (or names no database)
    /// or the server cannot be reached.
    pub async fn open(url: &str, table: &TableName, timeout: Duration) -> Result<Self> {
        Self::open_with_min_period(
            url,
            table,
            timeout,
            scheduler_core::control::DEFAULT_MIN_SCHEDULE_PERIOD,
        )
        .await
    }

    /// [`open`](Self::open), the store's shortest `every` period for the dynamic
    /// schedules this command puts `min_schedule_period` (the stores' own option:
    /// `schedules put --min-period`).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub async fn open_with_min_period(
        url: &str,
        table: &TableName,
        timeout: Duration,
        min_schedule_period: Duration,
    ) -> Result<Self> {
        match sqlite_path(url) {
            Some(path) => {
                let path = path?;
                // Opening creates a missing file: a typo would quietly start an
                // empty store that no instance uses.
                if !path.exists() {
                    return Err(Error::NoSqliteFile { path });
                }
                let mut options = SqliteOptions::default()
                    .migrate(false)
                    .max_connections(1)
                    .busy_timeout(timeout)
                    .min_schedule_period(min_schedule_period);
                options.table = table.clone();
                let store = SqliteStore::open(&path, options)
                    .await
                    .map_err(Error::OpenSqlite)?;
                Ok(Database::Sqlite(store))
            }
            None => {
                let mut options = PostgresOptions::default()
                    .migrate(false)
                    // Whatever version the tables are at: the tool reads, and
                    // writes only columns (and control tables) it names.
                    .check_schema(false)
                    .max_connections(1)
                    .connect_timeout(timeout)
                    .min_schedule_period(min_schedule_period);
                options.table = table.clone();
                Ok(Database::Postgres(
                    PostgresStore::connect(url, options).await?,
                ))
            }
        }
    }

    /// The store, as the runtime sees it.
    pub fn store(&self) -> &dyn Store {
        match self {
            Database::Postgres(store) => store,
            Database::Sqlite(store) => store,
        }
    }

    /// The store's controls.
    ///
    /// # Errors
    /// [`Error::NoControls`] if the store keeps none.
    pub fn controls(&self) -> Result<&dyn Controls> {
        self.store().controls().ok_or(Error::NoControls)
    }

    /// The PostgreSQL store, for `command`, which reads PostgreSQL's own views.
    ///
    /// # Errors
    /// [`Error::PostgresOnly`] on a SQLite file.
    pub fn postgres(&self, command: &'static str) -> Result<&PostgresStore> {
        match self {
            Database::Postgres(store) => Ok(store),
            Database::Sqlite(store) => Err(Error::PostgresOnly {
                command,
                path: store.path().to_owned(),
            }),
        }
    }

    /// Closes the pool, waiting for its connections to close.
    pub async fn close(self) {
        match self {
            Database::Postgres(store) => {
                let _ = store.close().await;
            }
            Database::Sqlite(store) => {
                let _ = store.close().await;
            }
        }
    }
}

/// The SQLite file `url` names, or `None` for a PostgreSQL URL (`postgres://`,
/// `postgresql://`).
///
/// `sqlite:///var/lib/app/scheduler.db` names an absolute path, `sqlite://app.db`
/// and `sqlite:app.db` one relative to the working directory; so does a plain path
/// (`/var/lib/app/scheduler.db`, `./app.db`, `app.db`: no scheme). The path is taken
/// as written (no percent-decoding); URL options (`?mode=ro`) are refused, since the
/// store opens the file its own way.
///
/// # Errors
/// [`Error::BadSqliteUrl`] for a URL with options or without a path;
/// [`Error::UnsupportedUrl`] for a scheme other than `postgres`, `postgresql` and
/// `sqlite`; [`Error::NoUrl`] for an empty one.
pub fn sqlite_path(url: &str) -> Option<Result<PathBuf>> {
    if url.trim().is_empty() {
        return Some(Err(Error::NoUrl));
    }
    if let Some((scheme, _)) = url.split_once("://") {
        let named = !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if named && !matches!(scheme, "postgres" | "postgresql" | "sqlite") {
            return Some(Err(Error::UnsupportedUrl {
                scheme: scheme.to_owned(),
            }));
        }
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return None;
    }
    let Some(rest) = url.strip_prefix("sqlite:") else {
        // A libpq `key=value` string is PostgreSQL's, which says what it reads.
        if url.contains('=') {
            return None;
        }
        // No scheme: a file's path, as a shell user writes it.
        return Some(Ok(PathBuf::from(url)));
    };
    let path = rest.strip_prefix("//").unwrap_or(rest);
    let bad = |reason| {
        Some(Err(Error::BadSqliteUrl {
            url: url.to_owned(),
            reason,
        }))
    };
    if path.contains('?') {
        return bad(
            "URL options (?mode=…) are not supported: give the file's path only, as \
             sqlite:///var/lib/app/scheduler.db",
        );
    }
    if path == ":memory:" {
        return bad(
            "an in-memory database is private to one process: name the app's database file",
        );
    }
    if path.is_empty() {
        return bad("it names no file: write sqlite:///absolute/path.db or sqlite://relative.db");
    }
    Some(Ok(PathBuf::from(path)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn sqlite_urls_name_files() {
        let path = |url| sqlite_path(url).map(|p| p.unwrap());
        assert_eq!(
            path("sqlite:///var/lib/app.db"),
            Some(PathBuf::from("/var/lib/app.db"))
        );
        assert_eq!(path("sqlite://app.db"), Some(PathBuf::from("app.db")));
        assert_eq!(
            path("sqlite:data/app.db"),
            Some(PathBuf::from("data/app.db"))
        );
        assert_eq!(path("postgres://app@db/app"), None);
        assert_eq!(path("postgresql:///app"), None);
        assert!(sqlite_path("sqlite://app.db?mode=ro").unwrap().is_err());
        assert!(sqlite_path("sqlite://").unwrap().is_err());
        assert!(sqlite_path("sqlite::memory:").unwrap().is_err());
        // A plain path is a SQLite file's.
        assert_eq!(
            path("/var/lib/app.db"),
            Some(PathBuf::from("/var/lib/app.db"))
        );
        assert_eq!(path("./app.db"), Some(PathBuf::from("./app.db")));
        assert_eq!(path("app.db"), Some(PathBuf::from("app.db")));
        // Another scheme is refused, naming the scheme only.
        for url in [
            "mysql://u:secret@h/db",
            "sqlite3:///app.db",
            "file:///app.db",
        ] {
            let err = sqlite_path(url).unwrap().unwrap_err();
            assert!(matches!(err, Error::UnsupportedUrl { .. }), "{url}");
            assert!(!err.to_string().contains("secret"));
        }
        assert!(matches!(sqlite_path(" ").unwrap(), Err(Error::NoUrl)));
        assert_eq!(path("host=db dbname=app"), None);
    }
}
