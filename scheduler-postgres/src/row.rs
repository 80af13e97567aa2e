//! Reading the store's rows: typed columns, timestamps checked for range first, and
//! leases and lease names.

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{FencingToken, Held, Holder, Lease, LeaseName, Taken, Tick};
use sea_orm::sqlx::ColumnIndex;
use sea_orm::sqlx::postgres::PgRow;
use sea_orm::{DbErr, QueryResult};

use crate::error::{Error, Result};

/// Reads column `col` of `row` as `T`; a column missing or of another type is a
/// [`Error::BadRow`] of `operation`.
pub(crate) fn get<T: sea_orm::TryGetable>(
    row: &QueryResult,
    col: &str,
    operation: &'static str,
) -> Result<T> {
    row.try_get::<T>("", col).map_err(|source| Error::BadRow {
        operation,
        cause: source,
    })
}

/// Reads a `timestamptz` column from its raw value, range included
/// ([`decode_time`]): a value set by hand must not panic.
pub(crate) fn time(row: &QueryResult, col: &str, operation: &'static str) -> Result<DateTime<Utc>> {
    time_or_clamp(row, col, operation, false)
}

/// [`time`] of a nullable column: `None` for NULL.
pub(crate) fn optional_time(
    row: &QueryResult,
    col: &str,
    operation: &'static str,
) -> Result<Option<DateTime<Utc>>> {
    use sea_orm::sqlx::{Row, ValueRef};
    let null = row
        .try_as_pg_row()
        .and_then(|row| row.try_get_raw(col).ok())
        .is_some_and(|raw| raw.is_null());
    if null {
        return Ok(None);
    }
    time(row, col, operation).map(Some)
}

/// [`time`], but a held row of another job's (read to tell the runtime when to ask
/// again, never to decide ownership) set out of range by hand reads as the end (or
/// start) of time instead of failing the whole batch it came with.
pub(crate) fn held_time(row: &QueryResult, col: &str) -> Result<DateTime<Utc>> {
    time_or_clamp(row, col, "take leases", true)
}

fn time_or_clamp(
    row: &QueryResult,
    col: &str,
    operation: &'static str,
    clamp: bool,
) -> Result<DateTime<Utc>> {
    match decode_time(row, col) {
        Decoded::Time(at) => Ok(at),
        Decoded::Beyond(beyond) if clamp => Ok(match beyond {
            OutOfRange::Infinity | OutOfRange::Future => DateTime::<Utc>::MAX_UTC,
            OutOfRange::MinusInfinity | OutOfRange::Past => DateTime::<Utc>::MIN_UTC,
        }),
        Decoded::Beyond(_) => Err(Error::BadRow {
            operation,
            cause: DbErr::Custom(format!(
                "column \"{col}\" holds a timestamp out of range (infinity?)"
            )),
        }),
        // NULL, a missing column, another type: the typed read says what is wrong.
        Decoded::Other => get(row, col, operation),
    }
}

/// A `timestamptz` value beyond chrono's range (years −262143 … 262142).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutOfRange {
    /// `'infinity'`.
    Infinity,
    /// `'-infinity'`.
    MinusInfinity,
    /// A finite time after chrono's last (or a value that does not decode).
    Future,
    /// A finite time before chrono's first.
    Past,
}

/// What a `timestamptz` column's raw value decodes to.
enum Decoded {
    Time(DateTime<Utc>),
    Beyond(OutOfRange),
    /// NULL, missing, not binary or not a `timestamptz`.
    Other,
}

/// Decodes `row`'s `timestamptz` column `col` from its raw binary value, once: sqlx
/// decodes a timestamp by adding its microseconds to 2000-01-01 with chrono's
/// panicking `+`, so a value beyond chrono's range (set by hand) must be caught
/// before sqlx sees it; reading the eight bytes here does both in one look-up.
fn decode_time(row: &QueryResult, col: &str) -> Decoded {
    match row.try_as_pg_row() {
        Some(pg) => decode_pg_time(pg, col),
        None => Decoded::Other,
    }
}

/// [`decode_time`] of a PostgreSQL row's column `col`, by name or by position.
fn decode_pg_time<I: ColumnIndex<PgRow>>(row: &PgRow, col: I) -> Decoded {
    use sea_orm::sqlx::postgres::{PgValueFormat, Postgres};
    use sea_orm::sqlx::{Row, Type, ValueRef};
    /// 2000-01-01, PostgreSQL's epoch, in microseconds since 1970-01-01.
    const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
    let Ok(raw) = row.try_get_raw(col) else {
        return Decoded::Other;
    };
    if raw.is_null()
        || raw.format() != PgValueFormat::Binary
        || !<DateTime<Utc> as Type<Postgres>>::compatible(&raw.type_info())
    {
        return Decoded::Other;
    }
    let micros = raw
        .as_bytes()
        .ok()
        .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
        .map(i64::from_be_bytes);
    let at = micros
        .and_then(|us| us.checked_add(PG_EPOCH_MICROS))
        .and_then(DateTime::from_timestamp_micros);
    if let Some(at) = at {
        return Decoded::Time(at);
    }
    // PostgreSQL stores the infinities as the extreme values.
    Decoded::Beyond(match micros {
        Some(i64::MAX) => OutOfRange::Infinity,
        Some(i64::MIN) => OutOfRange::MinusInfinity,
        Some(us) if us < 0 => OutOfRange::Past,
        _ => OutOfRange::Future,
    })
}

/// Whether `row`'s `timestamptz` column `col` holds a value chrono cannot (see
/// [`decode_time`]). `None` for a value in range, a NULL, or a column that is not a
/// binary `timestamptz`.
pub(crate) fn timestamp_out_of_range(row: &QueryResult, col: &str) -> Option<OutOfRange> {
    match decode_time(row, col) {
        Decoded::Beyond(beyond) => Some(beyond),
        Decoded::Time(_) | Decoded::Other => None,
    }
}

/// A won lease of a take's answer.
pub(crate) fn lease_from_row(row: &QueryResult) -> Result<Lease> {
    const OP: &str = "take leases";
    Ok(Lease {
        name: name_from_row(row, OP)?,
        holder: Holder::from_stored(get(row, "holder", OP)?),
        tick: Tick::new(time(row, "tick", OP)?),
        token: FencingToken::new(get(row, "token", OP)?),
        expires_at: time(row, "expires_at", OP)?,
    })
}

/// The `name` column as a [`LeaseName`]: a name that is not one is a bad row. Read
/// in place (one copy, the name's own), not as a `String` first.
pub(crate) fn name_from_row(row: &QueryResult, operation: &'static str) -> Result<LeaseName> {
    use sea_orm::sqlx::Row;
    let text = (row.try_as_pg_row()).and_then(|pg| pg.try_get::<&str, _>("name").ok());
    let parsed = match text {
        Some(text) => text.parse::<LeaseName>(),
        None => LeaseName::new(get::<String>(row, "name", operation)?),
    };
    parsed.map_err(|e| Error::BadRow {
        operation,
        cause: DbErr::Custom(e.to_string()),
    })
}

/// A take's answer from its `rows` (won, held or paused, one per lease) and `clock`,
/// the row whose `now` is the latest (the last one produced), received at
/// `received`.
pub(crate) fn taken_from_rows(
    rows: &[QueryResult],
    clock: Option<&QueryResult>,
    received: std::time::Instant,
) -> scheduler_core::Result<Taken> {
    let mut taken = Taken::default();
    let columns = (rows.first())
        .and_then(QueryResult::try_as_pg_row)
        .and_then(TakeColumns::of);
    for row in rows {
        let quick = (columns.as_ref())
            .zip(row.try_as_pg_row())
            .and_then(|(columns, pg)| columns.read(pg));
        match quick {
            Some(TakeRow::Paused(name)) => taken.paused.push(name),
            Some(TakeRow::Won(lease)) => taken.won.push(lease),
            Some(TakeRow::Held(held)) => taken.held.push(held),
            // Not as expected: read by name, which says what is wrong.
            None => take_row(row, &mut taken)?,
        }
    }
    // The last row's clock: rows come in the order they were produced, so it is
    // the latest, the closest to the answer's arrival (read once, not per row).
    // The runtime takes the sample as read when this call returns: the time spent
    // decoding since the rows arrived is added (a few milliseconds per thousand
    // rows), so the sample still errs late, by the way back only, never early.
    let now = clock
        .map(|row| time(row, "now", "take leases"))
        .transpose()?;
    taken.now = now.map(|now| now + TimeDelta::from_std(received.elapsed()).unwrap_or_default());
    Ok(taken)
}

/// A row of a take's answer, read by name: what [`TakeColumns::read`] could not read
/// (a bad row's error names the column).
fn take_row(row: &QueryResult, taken: &mut Taken) -> Result<()> {
    if get::<bool>(row, "paused", "take leases")? {
        taken.paused.push(name_from_row(row, "take leases")?);
    } else if get::<bool>(row, "won", "take leases")? {
        taken.won.push(lease_from_row(row)?);
    } else {
        taken.held.push(Held {
            name: name_from_row(row, "take leases")?,
            tick: Tick::new(held_time(row, "tick")?),
            expires_at: held_time(row, "expires_at")?,
            completed: get(row, "completed", "take leases")?,
        });
    }
    Ok(())
}

/// A row of a take's answer.
enum TakeRow {
    Paused(LeaseName),
    Won(Lease),
    Held(Held),
}

/// Where a take's answer has each column, found once per answer: sea-orm's read by
/// name formats the name into a new string and hashes it, per column and row, which
/// at 10,000 rows a take cost more than decoding them.
struct TakeColumns {
    won: usize,
    paused: usize,
    name: usize,
    holder: usize,
    tick: usize,
    token: usize,
    expires_at: usize,
    completed: usize,
}

impl TakeColumns {
    fn of(row: &PgRow) -> Option<Self> {
        use sea_orm::sqlx::{Column, Row};
        let at = |name: &str| row.try_column(name).ok().map(Column::ordinal);
        Some(Self {
            won: at("won")?,
            paused: at("paused")?,
            name: at("name")?,
            holder: at("holder")?,
            tick: at("tick")?,
            token: at("token")?,
            expires_at: at("expires_at")?,
            completed: at("completed")?,
        })
    }

    /// `row` read by position; `None` for anything not as expected (a NULL, a value
    /// out of range, another type), left to [`take_row`].
    fn read(&self, row: &PgRow) -> Option<TakeRow> {
        use sea_orm::sqlx::Row;
        let time = |col| match decode_pg_time(row, col) {
            Decoded::Time(at) => Some(at),
            Decoded::Beyond(_) | Decoded::Other => None,
        };
        let name = row.try_get::<&str, _>(self.name).ok()?.parse::<LeaseName>();
        let name = name.ok()?;
        if row.try_get::<bool, _>(self.paused).ok()? {
            return Some(TakeRow::Paused(name));
        }
        if row.try_get::<bool, _>(self.won).ok()? {
            return Some(TakeRow::Won(Lease {
                name,
                holder: Holder::from_stored(row.try_get::<String, _>(self.holder).ok()?),
                tick: Tick::new(time(self.tick)?),
                token: FencingToken::new(row.try_get::<i64, _>(self.token).ok()?),
                expires_at: time(self.expires_at)?,
            }));
        }
        Some(TakeRow::Held(Held {
            name,
            tick: Tick::new(time(self.tick)?),
            expires_at: time(self.expires_at)?,
            completed: row.try_get::<bool, _>(self.completed).ok()?,
        }))
    }
}
