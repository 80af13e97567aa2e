//! Row decoding: every value read from the lease table is checked, never trusted.

use chrono::{DateTime, Utc};
use scheduler_core::{FencingToken, Held, Holder, Lease, LeaseName, Tick};
use sea_orm::{DbErr, QueryResult};

use crate::error::{Error, Result};

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

/// A stored time (microseconds since the epoch) as a `DateTime`.
pub(crate) fn time(row: &QueryResult, col: &str, operation: &'static str) -> Result<DateTime<Utc>> {
    let micros: i64 = get(row, col, operation)?;
    DateTime::from_timestamp_micros(micros).ok_or_else(|| Error::BadRow {
        operation,
        cause: DbErr::Custom(format!(
            "{col} = {micros} is out of range as microseconds since the epoch"
        )),
    })
}

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

pub(crate) fn held_from_row(row: &QueryResult) -> Result<Held> {
    const OP: &str = "take leases";
    Ok(Held {
        name: name_from_row(row, OP)?,
        tick: Tick::new(time(row, "tick", OP)?),
        expires_at: time(row, "expires_at", OP)?,
        completed: get::<i64>(row, "completed", OP)? != 0,
    })
}

pub(crate) fn name_from_row(row: &QueryResult, operation: &'static str) -> Result<LeaseName> {
    let name: String = get(row, "name", operation)?;
    LeaseName::new(name).map_err(|e| Error::BadRow {
        operation,
        cause: DbErr::Custom(e.to_string()),
    })
}
