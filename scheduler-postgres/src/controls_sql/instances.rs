//! The instances' statements ([`Controls::heartbeat`](scheduler_core::Controls::heartbeat)):
//! one row per node in `<table>_instances` (migration 5), and which nodes'
//! registrations count.

use scheduler_migrations::TableName;

/// The instances' statements, with the table names spliced in once.
#[derive(Debug, Clone)]
pub(crate) struct InstanceSql {
    /// `$1` node, `$2` version, `$3` started_at, `$4` the expiry in microseconds:
    /// the node's row, seen now.
    pub(crate) beat: String,
    /// `$1` node: its row marked stopped.
    pub(crate) stop: String,
    /// Every instance, by node, with its node's registrations (`handlers`, `jobs`:
    /// sorted arrays).
    pub(crate) read: String,
}

/// `SELECT DISTINCT` the `column` of `registrations` (a registration table of
/// `table`) that count: the node never beat (an instance of a version before
/// heartbeats), or it is live (not stopped, not expired on the database's clock).
pub(crate) fn live(table: &TableName, registrations: &str, column: &str) -> String {
    let instances = table.with_suffix("_instances");
    format!(
        "SELECT DISTINCT r.{column} AS {column} FROM {registrations} r \
         LEFT JOIN {instances} i ON i.node = r.node \
         WHERE i.node IS NULL OR (NOT i.stopped AND i.expires_at > now()) \
         ORDER BY 1"
    )
}

impl InstanceSql {
    pub(crate) fn new(table: &TableName) -> Self {
        let instances = table.with_suffix("_instances");
        let handlers = table.with_suffix("_handlers");
        let jobs = table.with_suffix("_jobs");
        Self {
            beat: format!(
                "INSERT INTO {instances} (node, version, started_at, seen_at, expires_at, stopped) \
                 VALUES ($1, $2, $3, now(), now() + $4::bigint * interval '1 microsecond', false) \
                 ON CONFLICT (node) DO UPDATE SET version = excluded.version, \
                   started_at = excluded.started_at, seen_at = excluded.seen_at, \
                   expires_at = excluded.expires_at, stopped = false"
            ),
            stop: format!("UPDATE {instances} SET stopped = true WHERE node = $1"),
            read: format!(
                "SELECT i.node, i.version, i.started_at, i.seen_at, i.expires_at, i.stopped, \
                   ARRAY(SELECT h.handler FROM {handlers} h WHERE h.node = i.node \
                         ORDER BY h.handler) AS handlers, \
                   ARRAY(SELECT j.job FROM {jobs} j WHERE j.node = i.node \
                         ORDER BY j.job) AS jobs \
                 FROM {instances} i ORDER BY i.node"
            ),
        }
    }
}
