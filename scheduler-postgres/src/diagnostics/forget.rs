//! The one repair, ending a lease whose holder is gone: [`forget_lease`].

use chrono::{DateTime, Utc};
use scheduler_migrations::TableName;

use super::{LeaseState, first};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::row::{get, time};
use crate::store::PostgresStore;

/// What [`forget_lease`] found, and what it did.
///
/// Nothing is ever deleted: the lease's row stays, with its fencing token, in every
/// case (see [`forget_lease`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Forgotten {
    /// The lease was held and `force` ended it: its expiry is now the database's
    /// `now()`, so the next take of the name wins, with a greater fencing token.
    Ended {
        /// The holder whose lease was ended.
        holder: String,
        /// Its fencing token.
        token: i64,
        /// Its new expiry: the database's `now()`.
        expired_at: DateTime<Utc>,
    },
    /// The lease was not held (expired or released): nothing was written. The next
    /// take of the name wins already.
    NotHeld {
        /// The holder of its last acquisition.
        holder: String,
        /// The fencing token of its last acquisition.
        token: i64,
        /// [`LeaseState::Expired`] or [`LeaseState::Released`].
        state: LeaseState,
        /// When it expired, on the database's clock.
        expired_at: DateTime<Utc>,
    },
    /// Refused: the lease is held and unexpired, and `force` was not given. Nothing
    /// was written.
    Held {
        /// Its holder.
        holder: String,
        /// Its holder's fencing token.
        token: i64,
        /// When it expires unless renewed, on the database's clock.
        until: DateTime<Utc>,
    },
    /// The table has no lease of that name: nothing was written.
    Missing,
}

/// What [`forget_lease`]'s statement is for, in errors.
const FORGET_LEASE: &str = "forget a lease";

/// Ends the lease `name` of `table` when its holder is gone: a lease held (by the
/// database's clock: unreleased and `expires_at > now()`) is refused
/// ([`Forgotten::Held`], with its holder and expiry) unless `force`, which expires
/// it at `now()` ([`Forgotten::Ended`]); a lease expired or released is left as it is
/// ([`Forgotten::NotHeld`]); a name without a row is [`Forgotten::Missing`]. `None`
/// when the database has no table `table` (read first, by a statement of its own).
///
/// **The row is never deleted**, because of the fencing token. A take inserts a
/// missing name's row with token 1 and adds 1 to an existing row's token, so a
/// deleted row would restart its name's tokens at 1: a holder of the old token 7
/// whose writes go to a system that refuses any token lower than the highest it has
/// seen would then be let through, and the new holder's token 1 refused. Tokens must
/// keep growing for a name ([`FencingToken`](scheduler_core::FencingToken)), so
/// forgetting a lease ends its holder's claim and keeps the row: the next take finds
/// it free and writes token + 1. A released row also keeps its completed tick from
/// running again. An expired row costs one row of the table and nothing else.
///
/// The decision and the write are one statement: the expiry is set only by an
/// `UPDATE … WHERE name = $1 AND force AND <held>`, so a lease taken after the row
/// was read can never be ended unforced. With `force`, the holder ended is the one
/// holding the row when the `UPDATE` locks it (a takeover or renewal meanwhile is
/// ended too, and reported); a row released meanwhile is read again.
///
/// `force` ends the claim, not the holder: its fenced writes
/// ([`PostgresStore::fenced`]) are refused from then on, but an instance still running
/// renews the lease back unless another takes it first. Use it for holders known to
/// be gone (a crashed instance with a long ttl).
///
/// # Errors
/// [`Error::Statement`] if a statement fails, [`Error::BadRow`] if the row cannot be
/// read: a column of an unexpected type, or an expiry set by hand that chrono cannot
/// hold (`'infinity'`).
///
/// # Cancel safety
/// Dropping the future may leave the statement running to its end: it either ends
/// the lease or does not, atomically.
pub async fn forget_lease(
    store: &PostgresStore,
    table: &TableName,
    name: &str,
    force: bool,
) -> Result<Option<Forgotten>> {
    let exists = store
        .query(
            FORGET_LEASE,
            "SELECT to_regclass($1) IS NOT NULL AS leases",
            vec![table.quoted().into()],
        )
        .await?;
    if !get::<bool>(first(&exists, FORGET_LEASE)?, "leases", FORGET_LEASE)? {
        return Ok(None);
    }
    let sql = forget_sql(table);
    // Forced, a row released (or expired) between the statement's snapshot and its
    // lock reads as held but was not ended: the next statement's snapshot sees it
    // free. Three attempts, then the row is reported as the last one saw it.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let rows = store
            .query(FORGET_LEASE, &sql, vec![name.into(), force.into()])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(Some(Forgotten::Missing));
        };
        if let Some(token) = get::<Option<i64>>(row, "ended_token", FORGET_LEASE)? {
            return Ok(Some(Forgotten::Ended {
                holder: get(row, "ended_holder", FORGET_LEASE)?,
                token,
                expired_at: time(row, "ended_at", FORGET_LEASE)?,
            }));
        }
        let held = get::<bool>(row, "held", FORGET_LEASE)?;
        if held && force && attempts < 3 {
            continue;
        }
        let holder = get(row, "holder", FORGET_LEASE)?;
        let token = get(row, "token", FORGET_LEASE)?;
        let expires_at = time(row, "expires_at", FORGET_LEASE)?;
        return Ok(Some(if held {
            Forgotten::Held {
                holder,
                token,
                until: expires_at,
            }
        } else {
            Forgotten::NotHeld {
                holder,
                token,
                state: match get::<bool>(row, "released", FORGET_LEASE)? {
                    true => LeaseState::Released,
                    false => LeaseState::Expired,
                },
                expired_at: expires_at,
            }
        }));
    }
}

/// `forget_lease`'s one statement (`$1` the name, `$2` force): the row as the
/// statement's snapshot saw it, and the holder the `UPDATE` ended, if it did.
///
/// The `UPDATE` re-checks its condition on the row it locks (a row changed since the
/// snapshot is read again), so `force` and being held decide together, on one row
/// version; unforced, it matches nothing and locks nothing.
fn forget_sql(table: &TableName) -> String {
    let t = table.quoted();
    format!(
        "WITH found AS ( \
           SELECT holder, token, expires_at, released_at IS NOT NULL AS released, \
                  released_at IS NULL AND expires_at > now() AS held \
           FROM {t} WHERE name = $1 \
         ), ended AS ( \
           UPDATE {t} SET expires_at = now() \
           WHERE name = $1 AND $2::boolean AND released_at IS NULL AND expires_at > now() \
           RETURNING holder, token, expires_at \
         ) \
         SELECT f.holder, f.token, f.expires_at, f.released, f.held, \
                e.holder AS ended_holder, e.token AS ended_token, e.expires_at AS ended_at \
         FROM found f LEFT JOIN ended e ON true"
    )
}
