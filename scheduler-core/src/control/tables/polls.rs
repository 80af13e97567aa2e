//! A poll on the control tables: one cheap read of the version while nothing
//! changed, else the state in one snapshot.

use super::ControlTables;
use crate::control::ControlState;
use crate::error::Result;

/// [`Controls::poll`](crate::Controls::poll) (with the schedules) or
/// [`Controls::poll_without_schedules`](crate::Controls::poll_without_schedules).
pub(super) async fn poll_state<T: ControlTables + ?Sized>(
    tables: &T,
    since: Option<i64>,
    with_schedules: bool,
) -> Result<Option<ControlState>> {
    if let Some(since) = since
        && tables.read_version().await? == since
    {
        return Ok(None);
    }
    Ok(Some(if with_schedules {
        tables.read_state(since).await?
    } else {
        tables.read_state_without_schedules(since).await?
    }))
}
