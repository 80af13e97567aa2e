//! The controls' statements run, pages of rows, and the rows read column by column
//! ([`Stored`], core's [`StoredRow`]: the decoding itself is core's).

use chrono::{DateTime, Utc};
use scheduler_core::control::Page;
use scheduler_core::control::stored::{StoredRow, decode_all};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, QueryResult, Statement, Value};

use crate::error::{Error, Result};
use crate::row::{get, time};
use crate::store::SqliteStore;

/// Runs `sql` on `conn` (the pool or an open transaction) and returns every row.
pub(super) async fn rows(
    store: &SqliteStore,
    conn: &impl ConnectionTrait,
    operation: &'static str,
    sql: &str,
    values: Vec<Value>,
) -> Result<Vec<QueryResult>> {
    conn.query_all_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        sql,
        values,
    ))
    .await
    .map_err(|source| store.origin.statement_error(operation, source))
}

/// The one row `sql` must return.
pub(super) async fn one(
    store: &SqliteStore,
    conn: &impl ConnectionTrait,
    operation: &'static str,
    sql: &str,
    values: Vec<Value>,
) -> Result<QueryResult> {
    rows(store, conn, operation, sql, values)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| bad_row(operation, "no row returned".to_owned()))
}

pub(super) fn bad_row(operation: &'static str, what: String) -> Error {
    Error::BadRow {
        operation,
        cause: DbErr::Custom(what),
    }
}

pub(super) fn flag(row: &QueryResult, col: &str, operation: &'static str) -> Result<bool> {
    Ok(get::<i64>(row, col, operation)? != 0)
}

pub(super) fn optional_time(
    row: &QueryResult,
    col: &str,
    operation: &'static str,
) -> Result<Option<DateTime<Utc>>> {
    match get::<Option<i64>>(row, col, operation)? {
        None => Ok(None),
        Some(_) => time(row, col, operation).map(Some),
    }
}

fn page_values(page: Page) -> [Value; 2] {
    [page.before.into(), i64::from(page.limit).into()]
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

    fn opt_flag(&self, col: &str) -> Result<Option<bool>> {
        Ok(get::<Option<i64>>(self.row, col, self.operation)?.map(|v| v != 0))
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

impl SqliteStore {
    /// One page of rows, of job `job` (`of_job`: the job, then the page's values)
    /// or of every job (`all`: the page's values).
    pub(super) async fn paged(
        &self,
        operation: &'static str,
        job: Option<&str>,
        page: Page,
        of_job: &str,
        all: &str,
    ) -> Result<Vec<QueryResult>> {
        let mut values: Vec<Value> = job.map(|j| j.to_owned().into()).into_iter().collect();
        values.extend(page_values(page));
        let sql = if job.is_some() { of_job } else { all };
        rows(self, &self.db, operation, sql, values).await
    }

    pub(super) async fn history_exists(&self) -> Result<bool> {
        const OP: &str = "look for the run history table";
        let found = rows(
            self,
            &self.db,
            OP,
            &self.control.history_table,
            vec![self.control.history_name.clone().into()],
        )
        .await?;
        Ok(!found.is_empty())
    }

    /// What `node` registered (handlers, jobs: `names`, sorted, without duplicates),
    /// in one write: `forget` deletes the node's names no longer among them,
    /// `register` adds the others or marks them seen now.
    pub(super) async fn register(
        &self,
        operation: &'static str,
        node: &str,
        names: &[String],
        forget: &str,
        register: &str,
    ) -> Result<()> {
        let mut list = String::from("[");
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                list.push(',');
            }
            crate::batch::string(&mut list, name);
        }
        list.push(']');
        let (_turn, txn) = self.begin_write(operation).await?;
        let values = || vec![node.to_owned().into(), list.clone().into()];
        rows(self, &txn, operation, forget, values()).await?;
        rows(self, &txn, operation, register, values()).await?;
        txn.commit()
            .await
            .map_err(|source| self.origin.statement_error(operation, source))
    }
}
