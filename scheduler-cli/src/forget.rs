//! `forget`: end a lease whose holder is gone, the one command that writes.
//!
//! A held lease is refused unless forced; the lease's row is kept in every case, so
//! that its fencing token keeps growing ([`diagnostics::forget_lease`]).

use chrono::{DateTime, SecondsFormat, Utc};
use scheduler_postgres::diagnostics;
pub use scheduler_postgres::diagnostics::Forgotten;
use scheduler_postgres::{PostgresStore, TableName};

use crate::error::{Error, Result};

/// The exit code of `forget` refused because the lease is held (without `--force`).
pub const EXIT_HELD: u8 = 3;
/// The exit code of `forget` when the table has no lease of that name.
pub const EXIT_MISSING: u8 = 4;

/// What `forget` did. Serialized as the `--json` output; field names are stable:
/// `table`, `lease`, `force`, `outcome` (`forgotten`, `not_held`, `held` when
/// refused, `missing`), and the lease as found: `holder`, `token`, `state` (`held`,
/// `expired`, `released`) and `expires_at` (after `forgotten`, the new expiry), each
/// `null` when missing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Forget {
    /// The lease table.
    pub table: String,
    /// The lease's name.
    pub lease: String,
    /// Whether `--force` was given.
    pub force: bool,
    /// What was found, and done.
    pub forgotten: Forgotten,
}

/// Ends the lease `name` of `table` if it is not held, or if `force`, through `store`
/// ([`diagnostics::forget_lease`]: one statement decides and writes; the row is never
/// deleted).
///
/// # Errors
/// [`Error::NoLeaseTable`] if the table does not exist, [`Error::Query`] if a query
/// fails, [`Error::BadRow`] if the row cannot be read.
pub async fn forget(
    store: &PostgresStore,
    table: &TableName,
    name: &str,
    force: bool,
) -> Result<Forget> {
    let forgotten = diagnostics::forget_lease(store, table, name, force)
        .await
        .map_err(Error::read)?
        .ok_or_else(|| Error::NoLeaseTable {
            table: table.to_string(),
        })?;
    Ok(Forget {
        table: table.to_string(),
        lease: name.to_owned(),
        force,
        forgotten,
    })
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

impl Forget {
    /// The human output: one line saying what was done.
    pub fn human(&self) -> String {
        let lease = &self.lease;
        match &self.forgotten {
            Forgotten::Ended { holder, token, .. } => format!(
                "forgot lease {lease}: {holder} (fencing token {token}) no longer holds it; \
                 the row stays, so the next take gets a greater token\n"
            ),
            Forgotten::NotHeld {
                holder,
                token,
                state,
                ..
            } => format!(
                "lease {lease} is not held ({} by {holder}, fencing token {token}): nothing to \
                 forget, the next take wins it\n",
                state.as_str()
            ),
            Forgotten::Held { holder, until, .. } => format!(
                "lease {lease} is held by {holder} until {}; pass --force to forget it anyway\n",
                time(*until)
            ),
            Forgotten::Missing => format!("no lease named {lease} in `{}`\n", self.table),
            // A later version's outcome: say so rather than guess.
            other => format!("lease {lease}: {other:?}\n"),
        }
    }

    /// The `--json` output.
    ///
    /// # Errors
    /// [`Error::Json`], which these types never cause.
    pub fn json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    /// The process's exit code: 0 when the lease is no longer held (forgotten, or it
    /// was not), [`EXIT_HELD`] when refused, [`EXIT_MISSING`] when there is no such
    /// lease (1 for an outcome this version does not know).
    pub fn exit_code(&self) -> u8 {
        match self.forgotten {
            Forgotten::Ended { .. } | Forgotten::NotHeld { .. } => 0,
            Forgotten::Held { .. } => EXIT_HELD,
            Forgotten::Missing => EXIT_MISSING,
            _ => 1,
        }
    }
}
