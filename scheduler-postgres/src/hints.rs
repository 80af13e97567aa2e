//! What to do about a failed statement, by SQLSTATE: the crate's one table of hints.
//!
//! A hint is appended to the driver's message (`; …`), so each starts with `; `.
//! Hints that need more than the SQLSTATE (the `GRANT` a migration lacks, named after
//! the user and schema) are built where that is known, and fall back to this table.

use sea_orm::DbErr;

/// SQLSTATE 25006 (`read_only_sql_transaction`).
pub(crate) const READ_ONLY: &str = "; the server is read-only (a hot standby or a read-only replica): point the URL at the primary";

/// Each hint once, with the SQLSTATEs that call for it.
const HINTS: &[(&[&str], &str)] = &[
    // undefined_table
    (
        &["42P01"],
        "; the table does not exist: run the migrations (open the store with migrate(true)) or check the table name and the search_path",
    ),
    // undefined_column, datatype_mismatch, undefined_function (an operator for the
    // wrong types), invalid_column_reference (ON CONFLICT without the primary key),
    // wrong_object_type, feature_not_supported ("cached plan must not change result
    // type": a column's type changed under an open store), and data exceptions from
    // values set by hand
    (
        &[
            "42703", "42804", "42883", "42P10", "42809", "0A000", "22P02", "22003", "22007",
            "22008", "23502", "23514",
        ],
        "; the lease table does not have the shape the store expects: was it altered by hand? restore the columns, types and primary key the migrations create",
    ),
    // read_only_sql_transaction
    (&["25006"], READ_ONLY),
    // insufficient_privilege
    (
        &["42501"],
        "; the database user lacks a right: it needs SELECT, INSERT and UPDATE on the lease table, SELECT on the lease table's _controls and _triggers tables (every take reads the pauses and the triggered runs there), and USAGE on their schema",
    ),
    // invalid_sql_statement_name, duplicate_prepared_statement
    (
        &["26000", "42P05"],
        "; prepared statements are lost between transactions: behind PgBouncer in transaction pooling mode add pgbouncer=true to the URL (for a pool of your own: scheduler_postgres::connect_options(url, &options) with PostgresOptions::for_url(url)), and run your own statements inside store.begin()",
    ),
    // idle_in_transaction_session_timeout
    (
        &["25P03"],
        "; the transaction sat idle longer than PostgresOptions::idle_transaction_timeout (a paused process, or slow work between statements inside fenced/keyed): it was rolled back",
    ),
];

/// The hint for `sqlstate`, if the table has one.
pub(crate) fn hint(sqlstate: &str) -> Option<&'static str> {
    HINTS
        .iter()
        .find(|(codes, _)| codes.contains(&sqlstate))
        .map(|(_, hint)| *hint)
}

/// A connection the other end closed before answering its first message: sqlx
/// reports it as `unexpected response from SSLRequest: 0x00`, which reads like a TLS
/// problem; it is what a proxy (HAProxy, PgBouncer) with no backend does.
pub(crate) const NO_BACKEND: &str = "; the server closed the connection before answering: a proxy with no backend (during a failover?) or a server going down";

/// The hint for `err` by its SQLSTATE, or for a connection closed before it was
/// answered ([`NO_BACKEND`]); `""` when there is none.
pub(crate) fn for_error(err: &DbErr) -> &'static str {
    if let Some(hint) = sqlstate(err).as_deref().and_then(hint) {
        return hint;
    }
    match sqlx_error(err) {
        Some(sea_orm::sqlx::Error::Protocol(message)) if message.contains("SSLRequest") => {
            NO_BACKEND
        }
        _ => "",
    }
}

/// sqlx's error inside a sea-orm one.
pub(crate) fn sqlx_error(err: &DbErr) -> Option<&sea_orm::sqlx::Error> {
    use sea_orm::RuntimeErr;
    match err {
        DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e))
        | DbErr::Conn(RuntimeErr::SqlxError(e)) => Some(e),
        _ => None,
    }
}

/// The SQLSTATE of a database error, if the error came from the server.
pub(crate) fn sqlstate(err: &DbErr) -> Option<String> {
    match sqlx_error(err)? {
        sea_orm::sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sqlstate_has_one_hint_and_every_hint_reads_as_an_appendix() {
        let mut seen: Vec<&str> = Vec::new();
        for (codes, hint) in HINTS {
            assert!(hint.starts_with("; "), "{hint}");
            for code in *codes {
                assert_eq!(code.len(), 5, "{code}");
                assert!(!seen.contains(code), "{code} is listed twice");
                seen.push(code);
            }
        }
        assert_eq!(hint("25006"), Some(READ_ONLY));
        assert_eq!(hint("00000"), None);
    }

    #[test]
    fn a_connection_closed_before_answering_is_told_as_such() {
        use std::sync::Arc;

        use sea_orm::RuntimeErr;
        let closed = DbErr::Conn(RuntimeErr::SqlxError(Arc::new(
            sea_orm::sqlx::Error::Protocol("unexpected response from SSLRequest: 0x00".into()),
        )));
        assert_eq!(for_error(&closed), NO_BACKEND);
        let other = DbErr::Conn(RuntimeErr::SqlxError(Arc::new(
            sea_orm::sqlx::Error::Protocol("something else".into()),
        )));
        assert_eq!(for_error(&other), "");
    }
}
