//! The lease statements' SQL text, built once per lease table.
//!
//! Values are always bound parameters (`$1`, `$2`, …): only the validated, quoted
//! table name and fragments built here from literals are spliced into the text.

use scheduler_migrations::TableName;

/// Reads the database's clock (`clock_timestamp()`, not the transaction's `now()`).
pub(crate) const NOW: &str = "SELECT clock_timestamp() AS now";

/// Take, renew and release, with the table name spliced in once.
///
/// - take (`$1` names, `$2` ticks, `$3` holders, `$4` ttl in ms, `$5` jobs and `$6`
///   nodes, `''` for a request no pause applies to): one row per lease asked for,
///   `won`, held (`completed` when released as completed), or `paused`;
/// - take known (`$1`–`$4` as take, `$5` whether each is paused, `$6` the control
///   version that was decided on, `$7`/`$8` the leases and holders of the triggered
///   runs that keep a completion): as take, and a last row with the version;
/// - renew (`$1` names, `$2` holders, `$3` ttl in ms): the renewed names and expiries;
/// - release (`$1` names, `$2` holders, `$3` completed): the released names;
/// - request cancel (`$1` name, `$2` the newer tick): the row marked, if any;
/// - create missing (`$1` names): the names that had no row and now have one.
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) take: String,
    pub(crate) take_known: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) create_missing: String,
    pub(crate) request_cancel: String,
}

impl Sql {
    /// The statements for the lease table `table`.
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        let controls = table.with_suffix("_controls");
        let version = table.with_suffix("_version");
        let triggers = table.with_suffix("_triggers");
        // Whether a row's tick was completed: released as completed, or held by a
        // triggered run whose claim took it from a completed tick (the claim keeps that
        // completion in its trigger row, `prev_released_at`, for the finish to put
        // back, and leaves the tick as it was). Without the second part, a claimant
        // that vanished left "this tick, expired, not released", free for the tick
        // that already ran. The open triggers (few; the partial index's own
        // condition is spelled out) are read once per statement, into a hashed
        // subplan, and probed only for a row the rest of the test leaves undecided
        // (a correlated `EXISTS` per row measured slower in the `leases` bench).
        //
        // `claims` gives those triggered runs' (lease, holder) pairs: read from the
        // triggers table, or, in the take that knows the controls ([`crate::pauses`]),
        // the pairs known as of the control version (`$7`, `$8`: every claim and
        // finish bumps it).
        let open_claims = format!(
            "SELECT tg.lease, tg.holder FROM {triggers} tg \
             WHERE tg.state <> 'done' AND tg.state = 'running' \
               AND tg.prev_released_at IS NOT NULL"
        );
        let known_claims =
            "SELECT k.lease, k.holder FROM unnest($7::text[], $8::text[]) AS k(lease, holder)";
        let completed = |l: &str, claims: &str| {
            format!("({l}.released_at IS NOT NULL OR ({l}.name, {l}.holder) IN ({claims}))")
        };
        // A lease is free for a tick when it has expired and was taken for an earlier
        // tick, or for this tick but never completed.
        let free = |l: &str, tick: &str, claims: &str| {
            format!(
                "{l}.expires_at <= now() AND ({l}.tick < {tick} \
                 OR ({l}.tick = {tick} AND NOT {completed}))",
                completed = completed(l, claims),
            )
        };
        // The held rows are read from the statement's snapshot (before the insert):
        // they tell the runtime when a retry could succeed, never who owns what —
        // except a row this very holder took for this tick (an earlier take whose
        // answer was lost), which is reported as won: holders are fresh per tick.
        // Only rows that were not free in the snapshot are reported (they were never
        // inserted, so they cannot be among the won; `IS NOT TRUE` keeps a row whose
        // columns were nulled by hand, which then fails to decode, loudly): a free row that lost a race to
        // another taker is left out, which `Taken::held` allows. (Reporting "every
        // row not won" took a join against `won` that a generic plan turned into a
        // filtered nested loop: quadratic for a big takeover.)
        //
        // Each row carries the database's clock as it was produced
        // (`clock_timestamp()`, not the transaction's `now()`): the latest is the
        // runtime's clock sample, read near the statement's end, so that a long take
        // (10,000 names: a few hundred milliseconds) still samples the clock closely.
        //
        // A request whose job is paused, everywhere (`node = ''`) or on the asking
        // node, is refused before anything else: it is neither inserted nor updated,
        // and comes back as `paused` only, never as won or held. So is a request
        // whose tick a resume's catch-up runs (`caught_up`, `$7`) when the tick lies
        // within a pause that ended with a catch-up. Each request looks its job up
        // by the controls table's primary key (a subplan per request, not a join);
        // a request no pause applies to names the job `''` and probes nothing.
        // The take's body after its `req` CTE, with `{extra}` added to every row
        // (the known variant's version column) and `{tail}` after its last part.
        let body = |req: &str, claims: &str, extra: &str, first_extra: &str, tail: &str| {
            format!(
                "WITH {req}, won AS ( \
                 INSERT INTO {t} AS l (name, holder, tick, token, taken_at, expires_at, released_at) \
                 SELECT req.name, req.holder, req.tick, 1, now(), \
                        now() + $4::bigint * interval '1 millisecond', NULL \
                 FROM req \
                 WHERE NOT req.paused AND NOT EXISTS ( \
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
                 SELECT true AS won, name, holder, tick, token, expires_at, false AS completed, \
                        false AS paused, clock_timestamp() AS now{first_extra} \
                 FROM won \
                 UNION ALL \
                 SELECT h.holder = req.holder AND h.tick = req.tick AND h.released_at IS NULL, \
                        h.name, h.holder, h.tick, h.token, h.expires_at, {held_completed}, \
                        false, clock_timestamp(){extra} \
                 FROM {t} h JOIN req ON h.name = req.name \
                 WHERE NOT req.paused AND ({pre}) IS NOT TRUE \
                 UNION ALL \
                 SELECT false, req.name, NULL, NULL, NULL, NULL, false, true, clock_timestamp(){extra} \
                 FROM req WHERE req.paused{tail}",
                pre = free("h", "req.tick", claims),
                decide = free("l", "excluded.tick", claims),
                held_completed = completed("h", claims),
            )
        };
        let take = body(
            &format!(
                "req AS ( \
                   SELECT r.name, r.tick, r.holder, CASE WHEN r.job = '' THEN false ELSE EXISTS ( \
                     SELECT 1 FROM {controls} c \
                     WHERE c.job = r.job AND c.node = ANY (ARRAY['', r.node]) \
                       AND (c.paused OR (r.caught_up AND c.catch_up \
                            AND r.tick BETWEEN c.since AND c.resumed_at)) \
                   ) END AS paused \
                   FROM unnest($1::text[], $2::timestamptz[], $3::text[], $5::text[], $6::text[], \
                               $7::bool[]) \
                     AS r(name, tick, holder, job, node, caught_up) \
                 )"
            ),
            &open_claims,
            "",
            "",
            "",
        );
        // The take when the store knows the controls as of version `$6`
        // ([`crate::pauses`]): each request says whether it is paused (`$5`, decided
        // from that knowledge), the triggered runs that keep a completion are given
        // (`$7`, `$8`), and neither the controls nor the triggers table is read (a
        // lock on them, a `VACUUM FULL`, holds up no take). Only the version row is read: if it
        // is no longer `$6` in the statement's snapshot, nothing is taken, and the
        // last row (`version` not NULL, always there) says which version it is.
        let take_known = body(
            &format!(
                "v AS (SELECT version FROM {version} WHERE id = 1), \
                 req AS ( \
                   SELECT r.name, r.tick, r.holder, r.paused \
                   FROM unnest($1::text[], $2::timestamptz[], $3::text[], $5::bool[]) \
                     AS r(name, tick, holder, paused) \
                   WHERE (SELECT v.version FROM v) = $6::bigint \
                 )"
            ),
            known_claims,
            ", NULL::bigint",
            ", NULL::bigint AS version",
            " UNION ALL \
             SELECT false, '', NULL, NULL, NULL, NULL, false, false, clock_timestamp(), \
                    (SELECT v.version FROM v)",
        );
        // Renew and release: one UPDATE each, driven by the requested names in name
        // order, each name a probe of the primary key. Every part of `mine` is there
        // for one of three reasons:
        //
        // 1. Linear under a generic plan. sqlx prepares the statement; after five runs
        //    PostgreSQL may plan it once for all parameters, guessing 10 rows for the
        //    arrays. A restriction on the table alone (`released_at IS NULL`) is then
        //    estimated from statistics that, with recurring jobs, say almost no lease
        //    is held: the table came out as a 1-row outer side of a nested loop that
        //    compared each lease with each name (999,000 rows removed to release
        //    1,000). So nothing restricts the table alone: `released_at` is compared
        //    with a column of `mine` that is always NULL, and the table's estimate is
        //    its size; and every join condition is one a hash or merge join cannot use
        //    (`= ANY (ARRAY[…])`, `IS NOT DISTINCT FROM`), so the only join left is a
        //    nested loop, and the cheapest one probes the primary key once per name
        //    (`Index Cond: name = ANY (ARRAY[mine.name])`). A table of a few pages may
        //    be scanned instead, per name: the cost is bounded by its size.
        // 2. Rows locked in name order, with no lock record. `FOR UPDATE` wrote a lock
        //    record for every row before its update (about 137 B of WAL per renewed
        //    lease instead of 82). The UPDATE locks each row as it reaches it; a nested
        //    loop reaches them in the order of its outer side, `mine`, which is the
        //    request sorted by name in the database's collation (the subquery's one
        //    `ORDER BY`, one unnest and one sort: the order of take's `ORDER BY
        //    req.name`, which a client-side sort by bytes is not under another
        //    collation). So renew, release and take
        //    batches wait on each other in one order and never in a cycle; RETURNING
        //    hands the rows back in that order.
        // 3. Still conditional on the holder. A row updated meanwhile (a takeover, a
        //    release) is checked again, holder and release included, before it is
        //    written: all of them are conditions of the UPDATE itself.
        let mine = "FROM ( \
               SELECT r.name, r.holder, NULL::timestamptz AS released_at \
               FROM unnest($1::text[], $2::text[]) AS r(name, holder) \
               ORDER BY r.name \
             ) AS mine \
             WHERE l.name = ANY (ARRAY[mine.name]) \
               AND l.holder IS NOT DISTINCT FROM mine.holder \
               AND l.released_at IS NOT DISTINCT FROM mine.released_at";
        // `cancel_requested`: a newer tick of the job asked this run to stop.
        let renew = format!(
            "UPDATE {t} l SET expires_at = now() + $3::bigint * interval '1 millisecond' \
             {mine} RETURNING l.name, l.expires_at, (l.cancel_tick > l.tick) IS TRUE AS cancel_requested"
        );
        // Marks a run of an older tick that still holds the lease, once per newer
        // tick; a row that is free, released, or already asked by this tick or a
        // later one is left alone, and so is a triggered run's row for a tick no
        // later than its trigger's instant (the row keeps the scheduled tick it held
        // before the claim). Open triggers are few (the partial index's condition).
        let request_cancel = format!(
            "UPDATE {t} l SET cancel_tick = $2 \
             WHERE l.name = $1 AND l.tick < $2 AND l.released_at IS NULL \
               AND l.expires_at > now() AND (l.cancel_tick IS NULL OR l.cancel_tick < $2) \
               AND NOT EXISTS (SELECT 1 FROM {triggers} tg \
                   WHERE tg.state <> 'done' AND tg.state = 'running' AND tg.lease = l.name \
                     AND tg.holder = l.holder AND tg.requested_at >= $2) \
             RETURNING l.name",
            triggers = table.with_suffix("_triggers"),
        );
        let release = format!(
            "UPDATE {t} l SET expires_at = LEAST(l.expires_at, now()), \
               released_at = CASE WHEN $3::boolean THEN now() END \
             {mine} RETURNING l.name"
        );
        // `$1` names: a row for each without one, free, its tick now completed (no
        // tick from before it can be taken), held by nobody (`''`, which no take
        // generates). In name order, as every lease statement locks.
        let create_missing = format!(
            "INSERT INTO {t} (name, holder, tick, token, taken_at, expires_at, released_at) \
             SELECT n.name, '', now(), 1, now(), now(), now() \
             FROM unnest($1::text[]) AS n(name) ORDER BY n.name \
             ON CONFLICT (name) DO NOTHING RETURNING name"
        );
        Self {
            take,
            take_known,
            renew,
            release,
            create_missing,
            request_cancel,
        }
    }
}
