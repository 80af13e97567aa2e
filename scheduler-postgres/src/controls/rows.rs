//! The controls' rows read column by column ([`Stored`], core's
//! [`StoredRow`](scheduler_core::control::stored::StoredRow)): the decoding itself is
//! core's, the same for every store.

use chrono::{DateTime, Utc};
use scheduler_core::control::stored::{StoredRow, decode_all};
use sea_orm::{DbErr, QueryResult};

use crate::error::{Error, Result};
use crate::row::{get, optional_time, time};

/// A bad row of `operation`, in words.
fn bad_row(operation: &'static str, what: String) -> Error {
    Error::BadRow {
        operation,
        cause: DbErr::Custom(what),
    }
}

/// The one row a statement must return.
pub(super) fn one_row(rows: Vec<QueryResult>, operation: &'static str) -> Result<QueryResult> {
    rows.into_iter().next().ok_or_else(|| {
        bad_row(
            operation,
            "no row returned (is the version row of the controls missing?)".to_owned(),
        )
    })
}

/// A row read by `operation`.
pub(super) struct Stored<'a> {
    pub(super) row: &'a QueryResult,
    pub(super) operation: &'static str,
}

impl StoredRow for Stored<'_> {
    type Error = Error;

    fn opt_text(&self, col: &str) -> Result<Option<String>> {
        get(self.row, col, self.operation)
    }

    fn int(&self, col: &str) -> Result<i64> {
        get(self.row, col, self.operation)
    }

    fn int4(&self, col: &str) -> Result<i64> {
        get::<i32>(self.row, col, self.operation).map(i64::from)
    }

    fn opt_flag(&self, col: &str) -> Result<Option<bool>> {
        get(self.row, col, self.operation)
    }

    fn time(&self, col: &str) -> Result<DateTime<Utc>> {
        time(self.row, col, self.operation)
    }

    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>> {
        optional_time(self.row, col, self.operation)
    }

    fn bad(&self, what: String) -> Error {
        bad_row(self.operation, what)
    }
}

/// Every row of `rows` through `decode`.
pub(super) fn all<'a, T>(
    rows: &'a [QueryResult],
    operation: &'static str,
    decode: fn(&Stored<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    decode_all(rows.iter().map(|row| Stored { row, operation }), decode)
}

/// The first row of `rows`, if any, through `decode`.
pub(super) fn first<'a, T>(
    rows: &'a [QueryResult],
    operation: &'static str,
    decode: fn(&Stored<'a>) -> Result<T>,
) -> Result<Option<T>> {
    rows.first()
        .map(|row| decode(&Stored { row, operation }))
        .transpose()
}
