//! The lease statements' SQL text, built once per lease table.
//!
//! Values are always bound parameters (`$1`, `$2`, …): only the validated, quoted
//! table name and fragments built here from literals are spliced into the text.

use scheduler_migrations::TableName;

/// Reads the database's clock (`clock_timestamp()`, not the transaction's `now()`).
pub(crate) const NOW: &str = "SELECT clock_timestamp() AS now";

/// Take, renew and release, with the table name spliced in once.
///
/// - take (`$1` names, `$2` ticks, `$3` holders, `$4` ttl in ms): one row per lease
///   asked for, `won` or held (`completed` when released as completed);
/// - renew (`$1` names, `$2` holders, `$3` ttl in ms): the renewed names and expiries;
/// - release (`$1` names, `$2` holders, `$3` completed): the released names.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) take: String,
    pub(crate) renew: String,
    pub(crate) release: String,
}

impl Sql {
    /// The statements for the lease table `table`.
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        // A lease is free for a tick when it has expired and was taken for an earlier
        // tick, or for this tick but never released as completed.
        let free = |l: &str, tick: &str| {
            format!(
                "{l}.expires_at <= now() AND ({l}.tick < {tick} \
                 OR ({l}.tick = {tick} AND {l}.released_at IS NULL))"
            )
        };
        // The held rows are read from the statement's snapshot (before the insert):
        // they tell the runtime when a retry could succeed, never who owns what —
        // except a row this very holder took for this tick (an earlier take whose
        // answer was lost), which is reported as won: holders are fresh per tick.
        let take = format!(
            "WITH req AS ( \
               SELECT r.name, r.tick, r.holder \
               FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS r(name, tick, holder) \
             ), won AS ( \
             INSERT INTO {t} AS l (name, holder, tick, token, taken_at, expires_at, released_at) \
             SELECT req.name, req.holder, req.tick, 1, now(), \
                    now() + $4::bigint * interval '1 millisecond', NULL \
             FROM req \
             WHERE NOT EXISTS ( \
               SELECT 1 FROM {t} h WHERE h.name = req.name AND NOT ({pre}) \
             ) \
             ORDER BY req.name \
             ON CONFLICT (name) DO UPDATE \
               SET holder = excluded.holder, tick = excluded.tick, token = l.token + 1, \
                   taken_at = excluded.taken_at, expires_at = excluded.expires_at, \
                   released_at = NULL \
               WHERE {decide} \
             RETURNING l.name, l.holder, l.tick, l.token, l.expires_at \
             ) \
             SELECT true AS won, name, holder, tick, token, expires_at, false AS completed, now() AS now \
             FROM won \
             UNION ALL \
             SELECT h.holder = req.holder AND h.tick = req.tick AND h.released_at IS NULL, \
                    h.name, h.holder, h.tick, h.token, h.expires_at, h.released_at IS NOT NULL, now() \
             FROM {t} h JOIN req ON h.name = req.name \
             WHERE NOT EXISTS (SELECT 1 FROM won WHERE won.name = h.name)",
            pre = free("h", "req.tick"),
            decide = free("l", "excluded.tick"),
        );
        // Renew and release lock their rows in name order, as take does, so batches of
        // different instances never wait on each other in a cycle.
        let mine = format!(
            "WITH req AS (SELECT * FROM unnest($1::text[], $2::text[]) AS r(name, holder)), \
             mine AS ( \
               SELECT l.name FROM {t} l JOIN req ON l.name = req.name AND l.holder = req.holder \
               WHERE l.released_at IS NULL ORDER BY l.name FOR UPDATE OF l \
             )"
        );
        let renew = format!(
            "{mine} UPDATE {t} l SET expires_at = now() + $3::bigint * interval '1 millisecond' \
             FROM mine WHERE l.name = mine.name RETURNING l.name, l.expires_at"
        );
        let release = format!(
            "{mine} UPDATE {t} l SET expires_at = LEAST(l.expires_at, now()), \
               released_at = CASE WHEN $3::boolean THEN now() END \
             FROM mine WHERE l.name = mine.name RETURNING l.name"
        );
        Self {
            take,
            renew,
            release,
        }
    }
}
