//! [`SqliteOptions`]: how a [`SqliteStore`](crate::SqliteStore) opens its file.

use std::time::Duration;

use scheduler_migrations::{InvalidTableName, TableName};

use crate::error::{Error, Result};

/// How a [`SqliteStore`](crate::SqliteStore) opens its database file and where it keeps its leases.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// The lease table. Default `scheduler_leases`. SQLite has no schemas, so the name
    /// must not be qualified.
    pub table: TableName,
    /// Create or upgrade the schema when the store opens. Default `true`.
    pub migrate: bool,
    /// Pool size. Default 4. Lease operations borrow a connection for one statement,
    /// so a pool of one suffices for the store; SQLite admits one writer at a time
    /// anyway, and the other connections let reads (the clock, the app's own queries)
    /// run beside a write.
    pub max_connections: u32,
    /// How long a write waits for its turn among this store's writes, and then for the
    /// file's write lock held by another connection or process, before it fails with
    /// [`Error::Busy`]. Default 5 s, at most [`Self::MAX_BUSY_TIMEOUT`].
    pub busy_timeout: Duration,
    /// Open the file read-only: for inspecting a store. Default `false`. The file must
    /// exist; the schema is neither created nor upgraded, and every take, renewal and
    /// release fails with [`Error::ReadOnly`].
    pub read_only: bool,
    /// The shortest `every` period a dynamic schedule put to this store may have
    /// ([`Controls::put_schedule`](scheduler_core::Controls::put_schedule) refuses a
    /// shorter one, whoever puts it: the app, the CLI, the dashboard). Default 1 s
    /// ([`DEFAULT_MIN_SCHEDULE_PERIOD`](scheduler_core::control::DEFAULT_MIN_SCHEDULE_PERIOD)):
    /// a shorter period is most often a typo (`every 1ms` for `every 1m`). Lower it
    /// for jobs meant to run more often. Rows already stored run as they are.
    pub min_schedule_period: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            table: TableName::default(),
            migrate: true,
            max_connections: 4,
            busy_timeout: Duration::from_secs(5),
            read_only: false,
            min_schedule_period: scheduler_core::control::DEFAULT_MIN_SCHEDULE_PERIOD,
        }
    }
}

impl SqliteOptions {
    /// The longest accepted busy timeout; longer ones are cut to it.
    pub const MAX_BUSY_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

    /// Keeps leases in `table`, a plain identifier (no schema: SQLite has none).
    ///
    /// # Errors
    /// [`Error::InvalidTableName`] if it is not a plain, unqualified identifier.
    pub fn table(mut self, table: &str) -> Result<Self> {
        let table = TableName::new(table)?;
        check_unqualified(&table)?;
        self.table = table;
        Ok(self)
    }

    /// Whether to create or upgrade the schema when the store opens.
    pub fn migrate(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// The pool size (at least 1).
    pub fn max_connections(mut self, max_connections: u32) -> Self {
        self.max_connections = max_connections.max(1);
        self
    }

    /// How long a write waits for its turn and for the file's write lock (see
    /// [`Self::busy_timeout`](field@Self::busy_timeout)).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout.min(Self::MAX_BUSY_TIMEOUT);
        self
    }

    /// The shortest `every` period a dynamic schedule put may have (see
    /// [`Self::min_schedule_period`](field@Self::min_schedule_period)).
    pub fn min_schedule_period(mut self, period: Duration) -> Self {
        self.min_schedule_period = period;
        self
    }

    /// Whether to open the file read-only.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }
}

/// Rejects `schema.table`: in SQLite a schema is an attached database.
pub(crate) fn check_unqualified(table: &TableName) -> Result<()> {
    match table.schema() {
        None => Ok(()),
        Some(_) => Err(Error::InvalidTableName(InvalidTableName {
            name: table.to_string(),
            reason: "SQLite has no schemas: use a plain table name such as `app_a_leases`",
        })),
    }
}
