//! The rules of the lists that scale ([`Controls::leases_listing`],
//! [`Controls::schedules_listing`], [`Controls::runs_where`],
//! [`Controls::failing_jobs`]), written once and run by every store's suite
//! (memory, SQLite, PostgreSQL; the run history's on the stores that keep one, and
//! on the defaults over a history of the test's).
//!
//! Each function uses names of its own (`lst-…`), so they may run on a store other
//! rules use too. Orders are the store's own (its `leases()`, `schedules()`): a
//! database may collate names otherwise than by bytes.

use std::collections::HashSet;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::{
    Controls, Cursor, FencingToken, Holder, LeaseRow, ListQuery, Listing, Outcome, Page, Release,
    RunQuery, RunRecord, RunRecorder, RunRow, ScheduleRow, Store, TakeRequest, Tick,
};

use crate::{SharedStore, name, tick, ttl, wait_until};

fn controls(store: &SharedStore) -> &dyn Controls {
    store
        .controls()
        .expect("the store keeps controls: Store::controls() returned None")
}

/// Walks every page of a list, forward from the first then backward from the last,
/// `limit` rows a page, and checks that each walk visits `expected` (names, in the
/// store's order) once each, in order, with the same total and the right flags.
async fn walk<T, F>(what: &str, expected: &[String], limit: u32, base: ListQuery, read: &F)
where
    F: AsyncFn(ListQuery) -> Listing<T>,
    T: Named,
{
    let total = expected.len() as u64;
    let check = |page: &Listing<T>, q: &ListQuery| {
        assert!(
            page.rows.len() <= limit as usize,
            "{what} {q:?}: {} rows",
            page.rows.len()
        );
        assert_eq!(page.total, total, "{what} {q:?}: the total");
        let names: Vec<&str> = page.rows.iter().map(Named::name).collect();
        let mut sorted = names.clone();
        sorted.sort_by_key(|n| expected.iter().position(|e| e == n));
        assert_eq!(names, sorted, "{what} {q:?}: ascending");
    };

    // Forward.
    let mut seen: Vec<String> = Vec::new();
    let mut q = ListQuery {
        limit,
        ..base.clone()
    };
    loop {
        let page = read(q.clone()).await;
        check(&page, &q);
        assert_eq!(
            page.more_before,
            !seen.is_empty(),
            "{what} {q:?}: more before"
        );
        seen.extend(page.rows.iter().map(|r| r.name().to_owned()));
        if !page.more_after {
            break;
        }
        assert_eq!(page.rows.len(), limit as usize, "{what} {q:?}: a full page");
        q.cursor = Cursor::After(seen.last().cloned().expect("a full page"));
    }
    assert_eq!(seen, expected, "{what}: forward");

    // Backward.
    let mut seen: Vec<String> = Vec::new();
    let mut q = ListQuery {
        limit,
        cursor: Cursor::Last,
        ..base
    };
    loop {
        let page = read(q.clone()).await;
        check(&page, &q);
        assert_eq!(
            page.more_after,
            !seen.is_empty(),
            "{what} {q:?}: more after"
        );
        let mut names: Vec<String> = page.rows.iter().map(|r| r.name().to_owned()).collect();
        names.append(&mut seen);
        seen = names;
        if !page.more_before {
            break;
        }
        assert_eq!(page.rows.len(), limit as usize, "{what} {q:?}: a full page");
        q.cursor = Cursor::Before(seen.first().cloned().expect("a full page"));
    }
    assert_eq!(seen, expected, "{what}: backward");
}

/// What a list's rows are named by.
trait Named {
    fn name(&self) -> &str;
}

impl Named for LeaseRow {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for ScheduleRow {
    fn name(&self) -> &str {
        &self.name
    }
}

/// The names of `rows` that `keep` keeps, in the order given.
fn names_of<T: Named>(rows: &[T], keep: impl Fn(&T) -> bool) -> Vec<String> {
    rows.iter()
        .filter(|r| keep(r))
        .map(|r| r.name().to_owned())
        .collect()
}

/// Takes `lease` for `node`'s holder, for `ms`.
async fn take_on(store: &SharedStore, lease: &str, node: &str, ms: u64) -> scheduler_core::Lease {
    let mut req = TakeRequest::new(name(lease), tick(store, 0).await);
    req.holder = Holder::generate_on(&Holder::prefix(node));
    let won = store.take(&[req], ttl(ms)).await.expect("take").won;
    won.into_iter().next().expect("a free lease is won")
}

/// Leases listed page by page in both directions, each once; counted, searched
/// (ASCII-case-insensitive, `%` and `_` literal), by the holder's node (a node with
/// `:` in it) and held or not (held, released, expired) by the store's clock; a
/// cursor between two names and past either end.
pub async fn leases_listing_pages_and_filters(store: &SharedStore) {
    let c = controls(store);
    for i in 0..23 {
        take_on(store, &format!("lst-l-{i:02}"), "web-1", 60_000).await;
    }
    // Searched: case and wildcards.
    for lease in [
        "lst-s-Mixed-CASE",
        "lst-s-pct%x",
        "lst-s-pctAx",
        "lst-s-us_x",
        "lst-s-usAx",
    ] {
        take_on(store, lease, "web-1", 60_000).await;
    }
    // By node: `eu:west` holds one; `eu`, and `eu:west:1`, hold others.
    let west = take_on(store, "lst-n-west", "eu:west", 60_000).await;
    take_on(store, "lst-n-eu", "eu", 60_000).await;
    take_on(store, "lst-n-west1", "eu:west:1", 60_000).await;
    // Held or not: one held, one released, one expired.
    take_on(store, "lst-h-held", "web-1", 60_000).await;
    let released = take_on(store, "lst-h-released", "web-1", 60_000).await;
    store
        .release(&[released.key()], Release::Completed)
        .await
        .expect("release");
    let expired = take_on(store, "lst-h-expired", "web-1", 300).await;
    wait_until(store, expired.expires_at).await;

    let all = c.leases().await.expect("leases");
    let read = async |q: ListQuery| c.leases_listing(&q).await.expect("leases listing");

    let ours = names_of(&all, |r| r.name.starts_with("lst-l-"));
    assert_eq!(ours.len(), 23);
    for limit in [1, 5, 23, 100] {
        walk(
            "leases",
            &ours,
            limit,
            ListQuery::new(limit).search("lst-l-"),
            &read,
        )
        .await;
    }
    // A cursor between names, before the first and after the last.
    let page = read(ListQuery::new(3).search("lst-l-").after("lst-l-04x")).await;
    assert_eq!(
        names_of(&page.rows, |_| true),
        ["lst-l-05", "lst-l-06", "lst-l-07"]
    );
    assert!(page.more_before && page.more_after);
    let page = read(ListQuery::new(3).search("lst-l-").before("lst-l-")).await;
    assert!(
        page.rows.is_empty() && !page.more_before && page.more_after,
        "{page:?}"
    );
    assert_eq!(page.total, 23);
    let page = read(ListQuery::new(3).search("lst-l-").after("lst-l-99")).await;
    assert!(
        page.rows.is_empty() && page.more_before && !page.more_after,
        "{page:?}"
    );
    // The limit is clamped to 1..=1000.
    assert_eq!(read(ListQuery::new(0).search("lst-l-")).await.rows.len(), 1);

    // Search: ASCII-case-insensitive, wildcards literal.
    let searched = async |text: &str| {
        let page = read(ListQuery::new(100).search(text)).await;
        assert_eq!(page.total, page.rows.len() as u64, "{text:?}");
        names_of(&page.rows, |_| true)
    };
    assert_eq!(searched("mixed-case").await, ["lst-s-Mixed-CASE"]);
    assert_eq!(searched("LST-S-MIXED").await, ["lst-s-Mixed-CASE"]);
    assert_eq!(searched("pct%").await, ["lst-s-pct%x"]);
    assert_eq!(searched("us_").await, ["lst-s-us_x"]);
    assert_eq!(searched("lst-s-pct").await.len(), 2);
    assert!(searched("lst-nothing").await.is_empty());

    // Node: the node part of `node:pid:random`, which may hold `:`.
    assert_eq!(
        all.iter()
            .find(|r| r.name == "lst-n-west")
            .and_then(LeaseRow::node),
        Some("eu:west")
    );
    assert_eq!(west.holder.as_str().rsplitn(3, ':').nth(2), Some("eu:west"));
    for (node, expect) in [
        ("eu:west", vec!["lst-n-west"]),
        ("eu", vec!["lst-n-eu"]),
        ("eu:west:1", vec!["lst-n-west1"]),
        ("west", vec![]),
        ("eu:", vec![]),
    ] {
        let page = read(ListQuery::new(100).search("lst-n-").node(node)).await;
        assert_eq!(names_of(&page.rows, |_| true), expect, "node {node:?}");
        assert_eq!(page.total, expect.len() as u64, "node {node:?}");
    }
    let web = names_of(&all, |r| r.node() == Some("web-1"));
    let page = read(ListQuery::new(1000).node("web-1")).await;
    assert_eq!(names_of(&page.rows, |_| true), web, "every lease of web-1");

    // Held: by the store's clock.
    let page = read(ListQuery::new(100).search("lst-h-").held(true)).await;
    assert_eq!(names_of(&page.rows, |_| true), ["lst-h-held"]);
    assert_eq!(page.total, 1);
    let page = read(ListQuery::new(100).search("lst-h-").held(false)).await;
    let mut not_held = names_of(&page.rows, |_| true);
    not_held.sort();
    assert_eq!(not_held, ["lst-h-expired", "lst-h-released"]);
    assert_eq!(page.total, 2);
    let now = store.now().await.expect("clock");
    let held = names_of(&all, |r| r.released_at.is_none() && r.expires_at > now);
    let page = read(ListQuery::new(1000).search("lst-").held(true)).await;
    let held: Vec<String> = held.into_iter().filter(|n| n.starts_with("lst-")).collect();
    assert_eq!(names_of(&page.rows, |_| true), held, "every lease held");
    // Filters together: counted together.
    let page = read(ListQuery::new(2).search("LST-").node("web-1").held(true)).await;
    let both = names_of(&all, |r| {
        r.name.starts_with("lst-") && r.node() == Some("web-1") && r.held_at(now)
    });
    assert_eq!(page.total, both.len() as u64);
    assert_eq!(names_of(&page.rows, |_| true), both[..2]);
}

/// Dynamic schedules listed page by page in both directions, each once, the
/// removed left out; counted, searched and by handler.
pub async fn schedules_listing_pages_and_filters(store: &SharedStore) {
    let c = controls(store);
    let handlers = ["lst-handler-a".to_owned(), "lst-handler-b".to_owned()];
    c.register_handlers("n1", &handlers)
        .await
        .expect("register");
    for i in 0..17 {
        let handler = &handlers[i % 2];
        let row = ScheduleRow::new(format!("lst-sch-{i:02}"), handler, "every 1h");
        c.put_schedule(&row, "ops", "").await.expect("put");
    }
    for name in ["lst-sch-05", "lst-sch-06"] {
        c.remove_schedule(name, "ops", "").await.expect("remove");
    }
    c.put_schedule(
        &ScheduleRow::new("lst-sch-Pct%", &handlers[0], "every 1h"),
        "ops",
        "",
    )
    .await
    .expect("put");
    let all = c.schedules().await.expect("schedules");
    let read = async |q: ListQuery| c.schedules_listing(&q).await.expect("schedules listing");

    let ours = names_of(&all, |r| r.name.starts_with("lst-sch-") && !r.removed);
    assert_eq!(ours.len(), 16, "17 + 1 put, 2 removed");
    for limit in [1, 4, 16, 50] {
        walk(
            "schedules",
            &ours,
            limit,
            ListQuery::new(limit).search("lst-sch-"),
            &read,
        )
        .await;
    }
    let by_b = names_of(&all, |r| {
        r.name.starts_with("lst-sch-") && r.handler == "lst-handler-b"
    });
    assert_eq!(by_b.len(), 7, "the odd ones but 05");
    walk(
        "schedules of a handler",
        &by_b,
        3,
        ListQuery::new(3)
            .search("lst-sch-")
            .handler("lst-handler-b"),
        &read,
    )
    .await;
    let page = read(ListQuery::new(10).search("SCH-pct%")).await;
    assert_eq!(names_of(&page.rows, |_| true), ["lst-sch-Pct%"]);
    assert_eq!(page.total, 1);
    let page = read(ListQuery::new(10).search("lst-sch-0_")).await;
    assert!(page.rows.is_empty(), "`_` is literal: {page:?}");
    let page = read(ListQuery::new(10).handler("lst-handler-none")).await;
    assert_eq!((page.total, page.rows.len()), (0, 0));
    assert!(!page.more_before && !page.more_after);
    // Every schedule, whatever its name.
    let every = names_of(&all, |r| !r.removed);
    let page = read(ListQuery::new(1000)).await;
    assert_eq!(names_of(&page.rows, |_| true), every);
}

/// A run of the history to record.
fn run(job: &str, node: &str, outcome: Outcome, at: DateTime<Utc>) -> RunRecord {
    RunRecord {
        job: job.to_owned(),
        tick: Tick::new(at),
        node: node.to_owned(),
        holder: Holder::generate_on(&Holder::prefix(node)),
        token: FencingToken::new(1),
        started: at,
        finished: at + TimeDelta::milliseconds(5),
        outcome,
        error: outcome.is_failure().then(|| "boom".to_owned()),
        lease_lost: false,
        attempt: 1,
    }
}

/// The run history read with filters (job, node, failed only), page by page to
/// the end, each run once, newest first; and the jobs whose latest run failed.
/// `history` records into `store`'s run history.
pub async fn runs_where_and_failing_jobs(store: &SharedStore, history: &dyn RunRecorder) {
    let c = controls(store);
    let jobs = ["lst-run-a", "lst-run-b", "lst-run-c", "lst-run-d"];
    let names: Vec<String> = jobs.iter().map(|j| (*j).to_owned()).collect();
    c.register_jobs("n1", &names).await.expect("register jobs");
    let t0 = store.now().await.expect("clock") - TimeDelta::hours(1);
    // Oldest first: a ends failed, b ends succeeded, c ends timed out, d retried.
    let plan = [
        ("lst-run-a", "n1", Outcome::Succeeded),
        ("lst-run-b", "n2", Outcome::Failed),
        ("lst-run-c", "n1", Outcome::Succeeded),
        ("lst-run-a", "n2", Outcome::Cancelled),
        ("lst-run-b", "n1", Outcome::Succeeded),
        ("lst-run-c", "n2", Outcome::Failed),
        ("lst-run-d", "n1", Outcome::Failed),
        ("lst-run-a", "n1", Outcome::Failed),
        ("lst-run-c", "n1", Outcome::TimedOut),
        ("lst-run-d", "n2", Outcome::Retried),
    ];
    for round in 0..3 {
        for (i, (job, node, outcome)) in plan.iter().enumerate() {
            let at = t0 + TimeDelta::seconds(round * 100 + i as i64);
            history
                .record(&run(job, node, *outcome, at))
                .await
                .expect("record");
        }
    }
    let all: Vec<RunRow> = c
        .runs(
            None,
            Page {
                before: None,
                limit: 10_000,
            },
        )
        .await
        .expect("runs")
        .into_iter()
        .filter(|r| r.job.starts_with("lst-run-"))
        .collect();
    assert_eq!(all.len(), 30);

    let queries = [
        RunQuery::default(),
        RunQuery::default().job("lst-run-a"),
        RunQuery::default().node("n2"),
        RunQuery::default().failed(),
        RunQuery::default().job("lst-run-c").failed(),
        RunQuery::default().job("lst-run-b").node("n1"),
        RunQuery::default().node("n1").failed(),
        RunQuery::default().job("lst-run-none"),
    ];
    for query in queries {
        let expected: Vec<i64> = all
            .iter()
            .filter(|r| query.matches(r))
            .map(|r| r.id)
            .collect();
        for limit in [1, 4, 100] {
            let mut seen = Vec::new();
            let mut page = Page {
                before: None,
                limit,
            };
            loop {
                let q = query.clone().page(page);
                let runs = c.runs_where(&q).await.expect("runs where");
                assert!(runs.len() <= limit as usize, "{q:?}");
                assert!(runs.iter().all(|r| q.matches(r)), "{q:?}: {runs:?}");
                let ours: Vec<i64> = runs
                    .iter()
                    .filter(|r| r.job.starts_with("lst-run-"))
                    .map(|r| r.id)
                    .collect();
                seen.extend(ours);
                if runs.len() < limit as usize {
                    break;
                }
                page.before = runs.last().map(|r| r.id);
            }
            assert_eq!(
                seen, expected,
                "{query:?} by {limit}: each once, newest first"
            );
        }
    }
    // The recent runs of a page of jobs, in one read: each job's newest, at most
    // `per_job` of them, a job without runs and a name twice changing nothing.
    for per_job in [1, 2, 5] {
        let asked = ["lst-run-c", "lst-run-a", "lst-run-none", "lst-run-a"].map(str::to_owned);
        let mut got = c.recent_runs(&asked, per_job).await.expect("recent runs");
        got.sort_by(|a, b| {
            (&a.job, std::cmp::Reverse(a.id)).cmp(&(&b.job, std::cmp::Reverse(b.id)))
        });
        got.dedup_by_key(|r| r.id);
        let mut expected = Vec::new();
        for job in ["lst-run-a", "lst-run-c"] {
            expected.extend(
                all.iter()
                    .filter(|r| r.job == job)
                    .take(per_job as usize)
                    .map(|r| r.id),
            );
        }
        let got: Vec<i64> = got.iter().map(|r| r.id).collect();
        assert_eq!(got, expected, "recent runs, {per_job} a job");
    }
    assert!(c.recent_runs(&[], 5).await.expect("none asked").is_empty());
    let too_many: Vec<String> = (0..=scheduler_core::control::listing::MAX_LIMIT)
        .map(|i| format!("lst-run-{i}"))
        .collect();
    let refused = c.recent_runs(&too_many, 1).await;
    assert!(
        matches!(refused, Err(scheduler_core::Error::InvalidInput { .. })),
        "{refused:?}"
    );

    let failed = c
        .runs_where(&RunQuery::default().failed())
        .await
        .expect("failed runs");
    let outcomes: HashSet<Outcome> = failed.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        HashSet::from([Outcome::Failed, Outcome::Cancelled, Outcome::TimedOut]),
        "not succeeded, not retried"
    );

    let failing: Vec<String> = c
        .failing_jobs()
        .await
        .expect("failing jobs")
        .into_iter()
        .filter(|j| j.starts_with("lst-run-"))
        .collect();
    assert_eq!(failing, ["lst-run-a", "lst-run-c"]);
    // The latest run decides: b fails now, a succeeds.
    let later = t0 + TimeDelta::seconds(1000);
    history
        .record(&run("lst-run-b", "n1", Outcome::Failed, later))
        .await
        .expect("record");
    history
        .record(&run("lst-run-a", "n1", Outcome::Succeeded, later))
        .await
        .expect("record");
    let failing: Vec<String> = c
        .failing_jobs()
        .await
        .expect("failing jobs")
        .into_iter()
        .filter(|j| j.starts_with("lst-run-"))
        .collect();
    assert_eq!(failing, ["lst-run-b", "lst-run-c"]);
}

/// Every listing rule that needs no run history, in turn, on one store.
pub async fn all(store: &SharedStore) {
    leases_listing_pages_and_filters(store).await;
    schedules_listing_pages_and_filters(store).await;
}
