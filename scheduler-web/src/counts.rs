//! [`Counts`]: the header's counts as a dashboard last read them, kept a few
//! seconds.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::frame::Summary;

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
    pub(crate) fn fresh(&self) -> Option<Summary> {
        let last = self.last.lock().ok()?;
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < self.max_age)
            .map(|(_, summary)| *summary)
    }

    pub(crate) fn keep(&self, summary: Summary) {
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
