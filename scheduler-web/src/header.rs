//! The frame of a page read for a request: its refresh checked, and the header's
//! counts read from the store ([`read`]) or, when read less than
//! [`Counts::max_age`] ago, kept from the last read, for the dashboard's middleware.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use scheduler_core::ListQuery;

use crate::frame::{Frame, Summary, address, refresh};
use crate::problem::Problem;
use crate::shared::Shared;

/// The header's counts as last read, and how long they are shown before they are
/// read again: four reads of the store on every page would cost more than the page
/// itself at 100,000 schedules. An action taken through the dashboard forgets them,
/// so the operator sees its effect at once.
#[derive(Debug)]
pub(crate) struct Counts {
    max_age: Duration,
    last: Mutex<Option<(Instant, Summary)>>,
}

impl Counts {
    pub(crate) fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            last: Mutex::new(None),
        }
    }

    /// The counts read less than `max_age` ago.
    fn fresh(&self) -> Option<Summary> {
        let last = self.last.lock().ok()?;
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < self.max_age)
            .map(|(_, summary)| *summary)
    }

    fn keep(&self, summary: Summary) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some((Instant::now(), summary));
        }
    }

    /// Forgets the counts: the next page reads them again.
    pub(crate) fn forget(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = None;
        }
    }
}

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
