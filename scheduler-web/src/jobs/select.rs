//! Which dynamic schedules one page of the jobs page shows, however many there are:
//! each filter reads a page from the store's index, or a short list (the pauses, the
//! failing jobs), never every schedule.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use scheduler_core::{Controls, Cursor, Listing, Pause, Result, RunRow};

use super::filters::{Filters, State};
use super::view::{JobView, RECENT_RUNS, leases_of};
use crate::shared::Shared;

/// The most schedules the `late` filter judges for one page.
pub(crate) const LATE_SCAN: u32 = 2_000;

/// One page of dynamic schedules, and where it stands.
#[derive(Debug, Default)]
pub(crate) struct Selected {
    pub(crate) jobs: Vec<JobView>,
    /// How many match the filters; `None` when not counted (`late`).
    pub(crate) total: Option<u64>,
    /// What is counted (`schedules`, `leases`).
    pub(crate) unit: &'static str,
    pub(crate) more_before: bool,
    pub(crate) more_after: bool,
    /// The names the page starts and ends at (what the links page from).
    pub(crate) first: Option<String>,
    pub(crate) last: Option<String>,
    /// The `late` filter: how many schedules were judged for this page.
    pub(crate) scanned: Option<u64>,
}

/// The page of dynamic schedules `filters` asks for, `limit` rows at most.
pub(crate) async fn dynamic(
    shared: &Shared,
    controls: &dyn Controls,
    filters: &Filters,
    paused: &[Pause],
    now: DateTime<Utc>,
) -> Result<Selected> {
    let limit = shared.page_size;
    match filters.state {
        _ if filters.node.is_some() => {
            // A node's leases, then the state among them (the page may be short).
            let failing = match filters.state {
                Some(State::Failing) => controls.failing_jobs().await?,
                _ => Vec::new(),
            };
            let mut selected = by_leases(shared, controls, filters, paused, now).await?;
            selected.jobs.retain(|job| match filters.state {
                None | Some(State::Running) => true,
                Some(State::Paused) => !job.pauses.is_empty(),
                Some(State::Failing) => failing.contains(&job.name),
                Some(State::Late) => job.late_since(now).is_some(),
            });
            Ok(selected)
        }
        Some(State::Running) => by_leases(shared, controls, filters, paused, now).await,
        Some(State::Paused) => {
            let names = paused.iter().map(|p| p.job.clone()).collect();
            by_names(shared, controls, filters, names, paused, now).await
        }
        Some(State::Failing) => {
            let names = controls.failing_jobs().await?;
            by_names(shared, controls, filters, names, paused, now).await
        }
        Some(State::Late) => late(controls, filters, limit, paused, now).await,
        None => {
            let listing = controls
                .schedules_listing(&filters.list_query(limit))
                .await?;
            let views = listing
                .rows
                .iter()
                .map(|r| JobView::dynamic(r, now))
                .collect();
            finish(controls, views, &listing, "schedules", paused).await
        }
    }
}

/// The views of a listing's page, loaded, and where the page stands.
async fn finish<T>(
    controls: &dyn Controls,
    views: Vec<JobView>,
    listing: &Listing<T>,
    unit: &'static str,
    paused: &[Pause],
) -> Result<Selected> {
    let jobs = load(controls, views, paused).await?;
    Ok(Selected {
        first: jobs.first().map(|j| j.name.clone()),
        last: jobs.last().map(|j| j.name.clone()),
        jobs,
        total: Some(listing.total),
        unit,
        more_before: listing.more_before,
        more_after: listing.more_after,
        scanned: None,
    })
}

/// Each view with its pauses, recent runs and lease.
pub(crate) async fn load(
    controls: &dyn Controls,
    views: Vec<JobView>,
    paused: &[Pause],
) -> Result<Vec<JobView>> {
    let mut names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
    names.sort_unstable();
    let leases = leases_of(controls, &names).await?;
    let runs = recent_runs(controls, &views).await?;
    Ok(with_runs(views, paused, runs)
        .map(|view| view.with_lease(&leases))
        .collect())
}

/// The recent runs of `views`, by job, newest first: one read.
async fn recent_runs(
    controls: &dyn Controls,
    views: &[JobView],
) -> Result<HashMap<String, Vec<RunRow>>> {
    let names: Vec<String> = views.iter().map(|v| v.name.clone()).collect();
    let mut by_job: HashMap<String, Vec<RunRow>> = HashMap::new();
    for chunk in names.chunks(scheduler_core::control::listing::MAX_LIMIT as usize) {
        for run in controls.recent_runs(chunk, RECENT_RUNS).await? {
            by_job.entry(run.job.clone()).or_default().push(run);
        }
    }
    for runs in by_job.values_mut() {
        runs.sort_by_key(|r| std::cmp::Reverse(r.id));
    }
    Ok(by_job)
}

/// Each view with its pauses and its runs out of `runs`.
fn with_runs<'a>(
    views: Vec<JobView>,
    paused: &'a [Pause],
    mut runs: HashMap<String, Vec<RunRow>>,
) -> impl Iterator<Item = JobView> + 'a {
    views.into_iter().map(move |view| {
        let mine = runs.remove(&view.name).unwrap_or_default();
        view.with(paused, mine)
    })
}

/// `running`, or a node's: a page of the leases (held now, or the node's), paged
/// by the store, each shown as its job's schedule (the jobs registered in code are
/// in their own table).
async fn by_leases(
    shared: &Shared,
    controls: &dyn Controls,
    filters: &Filters,
    paused: &[Pause],
    now: DateTime<Utc>,
) -> Result<Selected> {
    let mut query = filters.list_query(shared.page_size);
    // The handler is a schedule's; the leases are filtered by name, node and held.
    query.handler = None;
    let listing = controls.leases_listing(&query).await?;
    let mut names: Vec<String> = listing.rows.iter().map(|l| l.job()).collect();
    names.dedup();
    let mut views = Vec::new();
    for name in names {
        if shared.job(&name).is_some() {
            continue;
        }
        if let Some(row) = controls.schedule(&name).await?
            && filters.handler.as_ref().is_none_or(|h| *h == row.handler)
        {
            views.push(JobView::dynamic(&row, now));
        }
    }
    let mut selected = finish(controls, views, &listing, "leases", paused).await?;
    // The leases page from the leases' names, not the jobs'.
    selected.first = listing.rows.first().map(|l| l.name.clone());
    selected.last = listing.rows.last().map(|l| l.name.clone());
    Ok(selected)
}

/// `paused`, `failing`: a short list of names (the pauses in force, the failing
/// jobs), searched and paged here, each shown as its schedule.
async fn by_names(
    shared: &Shared,
    controls: &dyn Controls,
    filters: &Filters,
    mut names: Vec<String>,
    paused: &[Pause],
    now: DateTime<Utc>,
) -> Result<Selected> {
    names.retain(|n| shared.job(n).is_none() && filters.matches_name(n));
    names.sort();
    names.dedup();
    let listing = Listing::of_matching(names, &filters.list_query(shared.page_size), |n| n);
    let mut views = Vec::new();
    for name in &listing.rows {
        if let Some(row) = controls.schedule(name).await?
            && filters.handler.as_ref().is_none_or(|h| *h == row.handler)
        {
            views.push(JobView::dynamic(&row, now));
        }
    }
    finish(controls, views, &listing, "schedules", paused).await
}

/// `late`: the schedules after the cursor, judged a page of the store's at a time,
/// until `limit` late ones are found or [`LATE_SCAN`] were judged.
async fn late(
    controls: &dyn Controls,
    filters: &Filters,
    limit: u32,
    paused: &[Pause],
    now: DateTime<Utc>,
) -> Result<Selected> {
    const BATCH: u32 = 200;
    let mut query = filters.list_query(BATCH);
    if !matches!(query.cursor, Cursor::After(_)) {
        query.cursor = Cursor::First;
    }
    let mut found = Vec::new();
    let (mut scanned, mut last_judged) = (0u64, None);
    let mut more_after;
    loop {
        let page = controls.schedules_listing(&query).await?;
        let views: Vec<JobView> = page.rows.iter().map(|r| JobView::dynamic(r, now)).collect();
        let mut names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
        names.sort_unstable();
        let leases = leases_of(controls, &names).await?;
        for view in views {
            scanned += 1;
            last_judged = Some(view.name.clone());
            let mut view = view.with_lease(&leases);
            view.pauses = paused
                .iter()
                .filter(|p| p.job == view.name)
                .cloned()
                .collect();
            if view.late_since(now).is_some() {
                found.push(view);
                if found.len() >= limit as usize {
                    break;
                }
            }
        }
        more_after = page.more_after || found.len() >= limit as usize;
        let Some(last) = last_judged.clone() else {
            break;
        };
        if found.len() >= limit as usize || !page.more_after || scanned >= u64::from(LATE_SCAN) {
            break;
        }
        query = query.after(last);
    }
    let runs = recent_runs(controls, &found).await?;
    let jobs: Vec<JobView> = with_runs(found, paused, runs).collect();
    Ok(Selected {
        first: jobs.first().map(|j| j.name.clone()),
        last: last_judged,
        jobs,
        total: None,
        unit: "schedules",
        more_before: matches!(filters.cursor, Cursor::After(_)),
        more_after,
        scanned: Some(scanned),
    })
}
