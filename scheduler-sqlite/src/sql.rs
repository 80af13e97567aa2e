//! The lease statements, with the table name spliced in once.

use scheduler_migrations::TableName;

/// The current time on SQLite's clock, as integer microseconds since the Unix epoch:
/// the unit of every time column of the lease table.
///
/// SQLite's clock has millisecond resolution, so the value is a whole number of
/// milliseconds (the floating-point steps are exact to well under one). `'now'` is
/// the same for every use within one statement, so a statement sees one instant.
pub(crate) const NOW: &str =
    "(CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)";

/// The statements, with the table name spliced in once.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) take: String,
    pub(crate) paused: String,
    pub(crate) won: String,
    pub(crate) held: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) request_cancel: String,
    pub(crate) create_missing: String,
    pub(crate) now: String,
}

impl Sql {
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        // Whether a row's tick was completed: released as completed, or held by a
        // triggered run whose claim took it from a completed tick (the claim keeps that
        // completion in its trigger row, `prev_released_at`, for the finish to put
        // back, and leaves the tick as it was). Without the second part, a claimant
        // that vanished left "this tick, expired, not released", free for the tick
        // that already ran. Open triggers are few; `state <> 'done'` is the partial
        // index's own condition, which SQLite needs spelled out to use it.
        let completed = |l: &str| {
            format!(
                "({l}.released_at IS NOT NULL OR EXISTS ( \
                   SELECT 1 FROM {triggers} AS tg \
                   WHERE tg.state <> 'done' AND tg.state = 'running' AND tg.lease = {l}.name \
                     AND tg.holder = {l}.holder AND tg.prev_released_at IS NOT NULL))",
                triggers = table.with_suffix("_triggers"),
            )
        };
        // A lease is free for a tick when it has expired and was taken for an earlier
        // tick, or for this tick but never completed.
        let free = |l: &str, tick: &str| {
            format!(
                "{l}.expires_at <= {NOW} AND ({l}.tick < {tick} \
                 OR ({l}.tick = {tick} AND NOT {completed}))",
                completed = completed(l),
            )
        };
        // A request whose job is paused, for every node (`node = ''`) or for the
        // asking node: two primary-key probes of the controls table. A request
        // without a control key has no job (`NULL`), which no row names. A request
        // whose tick a resume's catch-up runs (`caught_up` 1) is refused as well when
        // it lies within a pause that ended with a catch-up (times in microseconds).
        let paused = format!(
            "EXISTS (SELECT 1 FROM {controls} AS c \
                     WHERE c.job = r.value ->> 3 AND c.node IN ('', r.value ->> 4) \
                       AND (c.paused OR (r.value ->> 5 = 1 AND c.catch_up = 1 \
                            AND r.value ->> 2 BETWEEN c.since AND c.resumed_at)))",
            controls = table.with_suffix("_controls"),
        );
        // `?1` is the batch as JSON:
        // `[["name","holder",tick_micros,"job","node",caught_up],…]`.
        // A paused job's request writes nothing. (A `WHERE` also tells SQLite's parser
        // that `ON CONFLICT` belongs to the upsert, not to a join.)
        let take = format!(
            "INSERT INTO {t} AS l (name, holder, tick, token, taken_at, expires_at, released_at) \
             SELECT r.value ->> 0, r.value ->> 1, r.value ->> 2, 1, {NOW}, {NOW} + ?2 * 1000, NULL \
             FROM json_each(?1) AS r \
             WHERE NOT {paused} \
             ON CONFLICT (name) DO UPDATE \
               SET holder = excluded.holder, tick = excluded.tick, token = l.token + 1, \
                   taken_at = excluded.taken_at, expires_at = excluded.expires_at, \
                   released_at = NULL \
               WHERE {decide}",
            decide = free("l", "excluded.tick"),
        );
        // Run after the upsert, in its transaction, with the same `?1`: the requests
        // it refused as paused (the store leaves them out of the two reads below),
        let paused = format!("SELECT r.value ->> 0 AS name FROM json_each(?1) AS r WHERE {paused}");
        // the rows it won, and the rows it did not. An unreleased row of the
        // requested holder and tick was won by this take, or by an earlier take of
        // the same holder whose answer was lost (won all the same).
        let won = format!(
            "SELECT l.name, l.holder, l.tick, l.token, l.expires_at \
             FROM json_each(?1) AS r JOIN {t} AS l ON l.name = r.value ->> 0 \
             WHERE l.holder IS r.value ->> 1 AND l.tick IS r.value ->> 2 \
               AND l.released_at IS NULL"
        );
        let held = format!(
            "SELECT l.name, l.tick, l.expires_at, {completed} AS completed \
             FROM json_each(?1) AS r JOIN {t} AS l ON l.name = r.value ->> 0 \
             WHERE l.holder IS NOT r.value ->> 1 OR l.tick IS NOT r.value ->> 2 \
               OR l.released_at IS NOT NULL",
            completed = completed("l"),
        );
        // `?1` is `[["name","holder"],…]`; each pair is looked up by primary key.
        let mine = "released_at IS NULL \
             AND (name, holder) IN (SELECT r.value ->> 0, r.value ->> 1 FROM json_each(?1) AS r)";
        // `cancel_requested`: a newer tick of the job asked this run to stop.
        let renew = format!(
            "UPDATE {t} SET expires_at = {NOW} + ?2 * 1000 \
             WHERE {mine} RETURNING name, expires_at, coalesce(cancel_tick > tick, 0) AS cancel_requested"
        );
        // `?1` the name, `?2` the newer tick (microseconds): marks a run of an older
        // tick that still holds the lease, once per newer tick.
        // A triggered run's row is left alone for a tick no later than its trigger's
        // instant (the row keeps the scheduled tick it held before the claim).
        let request_cancel = format!(
            "UPDATE {t} AS l SET cancel_tick = ?2 \
             WHERE l.name = ?1 AND l.tick < ?2 AND l.released_at IS NULL \
               AND l.expires_at > {NOW} AND (l.cancel_tick IS NULL OR l.cancel_tick < ?2) \
               AND NOT EXISTS (SELECT 1 FROM {triggers} AS tg \
                   WHERE tg.state <> 'done' AND tg.state = 'running' AND tg.lease = l.name \
                     AND tg.holder = l.holder AND tg.requested_at >= ?2) \
             RETURNING name",
            triggers = table.with_suffix("_triggers"),
        );
        // `?1` is `[["name"],…]`: a row for each name without one, free, its tick now
        // completed (no tick from before it can be taken), held by nobody (`''`).
        let create_missing = format!(
            "INSERT INTO {t} (name, holder, tick, token, taken_at, expires_at, released_at) \
             SELECT r.value ->> 0, '', {NOW}, 1, {NOW}, {NOW}, {NOW} FROM json_each(?1) AS r \
             WHERE true ON CONFLICT (name) DO NOTHING RETURNING name"
        );
        let release = format!(
            "UPDATE {t} SET expires_at = min(expires_at, {NOW}), \
               released_at = CASE WHEN ?2 THEN {NOW} END \
             WHERE {mine} RETURNING name"
        );
        Self {
            take,
            paused,
            won,
            held,
            renew,
            release,
            request_cancel,
            create_missing,
            now: format!("SELECT {NOW} AS now"),
        }
    }
}
