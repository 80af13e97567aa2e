//! The frame of a page read for a request: its refresh checked, and the header's
//! counts read from the store ([`read`]) or, when read moments ago, kept from the
//! last read ([`Counts`](crate::counts::Counts)), for the dashboard's middleware.

use scheduler_core::ListQuery;

use crate::frame::{Frame, Summary, address, refresh};
use crate::problem::Problem;
use crate::shared::Shared;

/// The frame of a `GET` of `path` (the page's path within the dashboard) with
/// `query`: its refresh (anything but one of the choices is a `400`), its address,
/// and the summary read from the store (or kept from a read moments ago).
pub(crate) async fn read(
    shared: &Shared,
    path: &str,
    query: Option<&str>,
) -> Result<Frame, Problem> {
    let refresh = refresh(query).map_err(Problem::bad_request)?;
    let summary = match shared.counts.fresh() {
        Some(summary) => Some(summary),
        None => match summary(shared).await {
            Ok(summary) => {
                shared.counts.keep(summary);
                Some(summary)
            }
            Err(e) => {
                tracing::warn!(error = %e, "dashboard: the header's counts could not be read");
                None
            }
        },
    };
    Ok(Frame {
        refresh,
        address: address(path, query),
        summary,
    })
}

/// The header's counts: the schedules counted by the store (not read), the pauses
/// in force (few), the leases held counted by the store, the failing jobs; the four
/// reads at once.
async fn summary(shared: &Shared) -> scheduler_core::Result<Summary> {
    let code = shared.jobs.len() as u64;
    let Some(controls) = shared.controls() else {
        return Ok(Summary {
            jobs: code,
            ..Summary::default()
        });
    };
    let one = ListQuery::new(1);
    let held = ListQuery::new(1).held(true);
    let (schedules, paused, running, failing) = tokio::try_join!(
        controls.schedules_listing(&one),
        controls.paused(),
        controls.leases_listing(&held),
        controls.failing_jobs(),
    )?;
    let mut paused: Vec<String> = paused.into_iter().map(|p| p.job).collect();
    paused.sort();
    paused.dedup();
    Ok(Summary {
        jobs: code + schedules.total,
        paused: paused.len() as u64,
        running: running.total,
        failing: failing.len() as u64,
    })
}
