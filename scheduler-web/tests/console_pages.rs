#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The console's list pages through the router an app nests: leases (paged both
//! ways, counted, searched and filtered, the filters kept by every link), failures
//! and audit (newest first, paged by id, filtered), every stored text escaped, every
//! address they cannot read a `400` in words, and every page bounded in size
//! whatever the store holds.

mod support;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use chrono::{TimeDelta, Utc};
use scheduler_core::{
    ControlAction, ControlRecord, ControlRequest, Controls as _, InstanceRow, LeaseRow, Outcome,
    ScheduleRow,
};
use scheduler_web::{Actions, Dashboard};
use support::{FakeStore, app, get};

const EVIL: &str = "<script>alert(1)</script>";

/// The address of the pager link `name` (`next`, `older`, …) of `body`, under
/// `/scheduler/`, if the page has one.
fn pager_link(body: &str, name: &str) -> Option<String> {
    let at = body.find(&format!("data-page=\"{name}\""))?;
    let before = &body[..at];
    let start = before.rfind("href=\"")? + "href=\"".len();
    let href = &before[start..];
    let href = &href[..href.find('"')?];
    let href = href.replace("&amp;", "&");
    Some(format!("/scheduler/{}", href.strip_prefix("./")?))
}

/// The names of the rows of `body` marked `data-{attr}`, in order.
fn rows(body: &str, attr: &str) -> Vec<String> {
    body.split(&format!("<tr data-{attr}=\""))
        .skip(1)
        .map(|r| r[..r.find('"').unwrap()].to_owned())
        .collect()
}

fn count_line(body: &str, page: &str) -> String {
    let at = body
        .find(&format!("data-count=\"{page}\""))
        .unwrap_or_else(|| panic!("no count line: {body}"));
    let rest = &body[at..];
    rest[rest.find('>').unwrap() + 1..rest.find("</p>").unwrap()].to_owned()
}

fn lease(name: &str, node: &str, held: bool) -> LeaseRow {
    let now = Utc::now();
    LeaseRow {
        name: name.to_owned(),
        holder: Some(format!("{node}:42:00ff00ff00ff00ff")),
        tick: now,
        token: 7,
        expires_at: now + TimeDelta::seconds(if held { 30 } else { -30 }),
        released_at: None,
    }
}

fn with_leases(leases: Vec<LeaseRow>) -> Arc<FakeStore> {
    let store = FakeStore::new();
    store.state.lock().unwrap().leases = leases;
    store
}

#[tokio::test]
async fn leases_are_paged_both_ways_and_counted() {
    // Seven leases, pages of three (the test app's page size).
    let names: Vec<String> = (1..=7).map(|i| format!("job-{i}")).collect();
    let store = with_leases(names.iter().map(|n| lease(n, "node-a", true)).collect());
    let app = app(&store, &[], Actions::default());

    let (status, _, first) = get(&app, "/scheduler/leases").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(rows(&first, "lease"), ["job-1", "job-2", "job-3"]);
    assert_eq!(count_line(&first, "leases"), "1–3 of 7, by name");
    assert!(pager_link(&first, "first").is_none() && pager_link(&first, "previous").is_none());

    let (_, _, second) = get(&app, &pager_link(&first, "next").unwrap()).await;
    assert_eq!(rows(&second, "lease"), ["job-4", "job-5", "job-6"]);
    assert_eq!(count_line(&second, "leases"), "4–6 of 7, by name");

    let (_, _, third) = get(&app, &pager_link(&second, "next").unwrap()).await;
    assert_eq!(rows(&third, "lease"), ["job-7"]);
    assert_eq!(count_line(&third, "leases"), "7–7 of 7, by name");
    assert!(pager_link(&third, "next").is_none() && pager_link(&third, "last").is_none());

    // And back.
    let (_, _, back) = get(&app, &pager_link(&third, "previous").unwrap()).await;
    assert_eq!(rows(&back, "lease"), ["job-4", "job-5", "job-6"]);
    assert_eq!(count_line(&back, "leases"), "4–6 of 7, by name");
    let (_, _, back) = get(&app, &pager_link(&back, "previous").unwrap()).await;
    assert_eq!(rows(&back, "lease"), ["job-1", "job-2", "job-3"]);
    assert_eq!(count_line(&back, "leases"), "1–3 of 7, by name");

    // The last page is the last three; from there, first.
    let (_, _, last) = get(&app, &pager_link(&first, "last").unwrap()).await;
    assert_eq!(rows(&last, "lease"), ["job-5", "job-6", "job-7"]);
    assert_eq!(count_line(&last, "leases"), "5–7 of 7, by name");
    let (_, _, again) = get(&app, &pager_link(&last, "first").unwrap()).await;
    assert_eq!(rows(&again, "lease"), ["job-1", "job-2", "job-3"]);
}

#[tokio::test]
async fn lease_filters_narrow_the_list_and_every_link_keeps_them() {
    let mut leases = Vec::new();
    for i in 1..=5 {
        leases.push(lease(&format!("report-{i}"), "node-a", i % 2 == 1));
        leases.push(lease(&format!("report-{i}:node-b"), "node-b", true));
        leases.push(lease(&format!("sweep-{i}"), "node-a", true));
    }
    let store = with_leases(leases);
    let app = app(&store, &[], Actions::default());

    let (status, _, body) = get(&app, "/scheduler/leases?q=REPORT&node=node-a&held=yes").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(rows(&body, "lease"), ["report-1", "report-3", "report-5"]);
    assert_eq!(count_line(&body, "leases"), "1–3 of 3 matching, by name");
    // The form shows the filters.
    assert!(body.contains(r#"name="q" value="REPORT""#), "{body}");
    assert!(body.contains(r#"<option value="yes" selected>"#), "{body}");

    let (_, _, body) = get(&app, "/scheduler/leases?q=report&held=no").await;
    assert_eq!(rows(&body, "lease"), ["report-2", "report-4"]);

    // Paging keeps the filters: node-b's five, three a page.
    let (_, _, first) = get(&app, "/scheduler/leases?node=node-b&held=").await;
    assert_eq!(count_line(&first, "leases"), "1–3 of 5 matching, by name");
    for name in ["next", "last"] {
        let link = pager_link(&first, name).unwrap();
        assert!(link.contains("node=node-b"), "{name}: {link}");
        let (_, _, page) = get(&app, &link).await;
        assert!(
            rows(&page, "lease").iter().all(|n| n.ends_with(":node-b")),
            "{name}: {page}"
        );
    }
    // Nothing matches: said in words, not a 400, when the node is known.
    let (status, _, body) = get(&app, "/scheduler/leases?node=node-b&q=sweep").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("No lease matches these filters."), "{body}");
}

#[tokio::test]
async fn failures_are_newest_first_across_jobs_paged_and_filtered() {
    let store = FakeStore::new();
    let mut failed = Vec::new();
    for i in 0..8 {
        let job = if i % 2 == 0 { "sweep" } else { "report" };
        store.add_run(job, Outcome::Succeeded, None);
        failed.push(store.add_run(job, Outcome::Failed, Some(&format!("boom {i}"))));
    }
    store.state.lock().unwrap().runs[1].node = "node-b".to_owned();
    let app = app(&store, &["sweep"], Actions::default());

    let (status, _, first) = get(&app, "/scheduler/failures").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let newest: Vec<String> = failed
        .iter()
        .rev()
        .take(3)
        .map(|id| id.to_string())
        .collect();
    assert_eq!(rows(&first, "run"), newest);
    assert!(
        first.contains("boom 7") && !first.contains("boom 4"),
        "{first}"
    );
    assert!(
        first.contains(r#"<a href="./job?name=report">report</a>"#),
        "{first}"
    );
    assert!(pager_link(&first, "newest").is_none());

    // Older, older, then back to the newest.
    let (_, _, second) = get(&app, &pager_link(&first, "older").unwrap()).await;
    let next: Vec<String> = failed
        .iter()
        .rev()
        .skip(3)
        .take(3)
        .map(|id| id.to_string())
        .collect();
    assert_eq!(rows(&second, "run"), next);
    let (_, _, third) = get(&app, &pager_link(&second, "older").unwrap()).await;
    assert_eq!(rows(&third, "run").len(), 2);
    assert!(pager_link(&third, "older").is_none(), "the oldest page");
    let (_, _, back) = get(&app, &pager_link(&third, "newest").unwrap()).await;
    assert_eq!(rows(&back, "run"), newest);

    // By job, by node.
    let (_, _, sweep) = get(&app, "/scheduler/failures?job=sweep").await;
    assert!(
        sweep.contains("boom 6") && !sweep.contains("boom 7"),
        "{sweep}"
    );
    let link = pager_link(&sweep, "older").unwrap();
    assert!(link.contains("job=sweep"), "{link}");
    let (_, _, node_b) = get(&app, "/scheduler/failures?node=node-b").await;
    assert_eq!(rows(&node_b, "run"), ["2"], "{node_b}");
    // A job that never failed is known, and said so.
    store.add_run("calm", Outcome::Succeeded, None);
    let (status, _, calm) = get(&app, "/scheduler/failures?job=calm").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        calm.contains("No run matching these filters failed."),
        "{calm}"
    );
}

#[tokio::test]
async fn the_audit_lists_every_jobs_controls_newest_first() {
    let store = FakeStore::new();
    for i in 0..5 {
        let job = if i % 2 == 0 { "sweep" } else { "report" };
        store
            .pause(&ControlRequest::new(job, format!("web:op-{i}")).why(format!("reason {i}")))
            .await
            .unwrap();
    }
    let app = app(&store, &["sweep", "report"], Actions::default());
    let (status, _, first) = get(&app, "/scheduler/audit").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(rows(&first, "control"), ["5", "4", "3"]);
    assert!(
        first.contains("web:op-4") && first.contains("reason 4"),
        "{first}"
    );
    let (_, _, older) = get(&app, &pager_link(&first, "older").unwrap()).await;
    assert_eq!(rows(&older, "control"), ["2", "1"]);
    assert!(pager_link(&older, "older").is_none());
    let (_, _, newest) = get(&app, &pager_link(&older, "newest").unwrap()).await;
    assert_eq!(rows(&newest, "control"), ["5", "4", "3"]);

    let (_, _, report) = get(&app, "/scheduler/audit?job=report").await;
    assert_eq!(rows(&report, "control"), ["4", "2"]);
    assert!(report.contains(r#"name="job" value="report""#), "{report}");
}

#[tokio::test]
async fn every_stored_text_is_escaped() {
    let store = with_leases(vec![lease(EVIL, EVIL, true)]);
    store.add_run(EVIL, Outcome::Failed, Some(EVIL));
    let long = format!("{EVIL}\n{}", "x".repeat(5000));
    store.add_run("sweep", Outcome::Failed, Some(&long));
    store.state.lock().unwrap().runs[0].node = EVIL.to_owned();
    store
        .pause(&ControlRequest::new(EVIL, EVIL).node(EVIL).why(EVIL))
        .await
        .unwrap();
    let app = app(&store, &["sweep"], Actions::default());
    for path in [
        "/scheduler/leases",
        "/scheduler/failures",
        "/scheduler/audit",
    ] {
        let (status, _, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert!(!body.contains("<script>"), "{path}: {body}");
        assert!(
            body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{path}: {body}"
        );
    }
    // A long error is folded, its first line the summary.
    let (_, _, body) = get(&app, "/scheduler/failures").await;
    assert!(
        body.contains("<details><summary><span class=\"bad\">&lt;script&gt;"),
        "{body}"
    );
    // Filters given back in the form are escaped too.
    let (_, _, body) = get(&app, "/scheduler/leases?q=%22%3E%3Cscript%3E").await;
    assert!(!body.contains("\"><script>"), "{body}");
}

#[tokio::test]
async fn addresses_the_pages_cannot_read_are_400_in_words() {
    let store = with_leases(vec![lease("sweep", "node-a", true)]);
    store.add_run("sweep", Outcome::Failed, Some("boom"));
    let app = app(&store, &["sweep"], Actions::default());
    for (path, says) in [
        ("/scheduler/leases?held=maybe", "unknown variant `maybe`"),
        ("/scheduler/leases?after=a&before=b", "not two"),
        ("/scheduler/leases?page=middle", "unknown variant `middle`"),
        ("/scheduler/leases?at=0", "counts rows from 1"),
        ("/scheduler/leases?at=x", "invalid digit"),
        ("/scheduler/leases?colour=red", "unknown field `colour`"),
        (
            "/scheduler/leases?node=nowhere",
            "no lease was ever held by a node",
        ),
        ("/scheduler/failures?before=seven", "invalid digit"),
        ("/scheduler/failures?before=0", "a number of at least 1"),
        ("/scheduler/failures?job=nope", "no job named \"nope\""),
        (
            "/scheduler/failures?node=nowhere",
            "no run was recorded on a node",
        ),
        ("/scheduler/failures?page=2", "unknown field `page`"),
        ("/scheduler/audit?job=nope", "no job named \"nope\""),
        ("/scheduler/audit?before=-4", "a number of at least 1"),
    ] {
        let (status, _, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(body.contains("role=\"alert\""), "{path}: {body}");
        let says = says.replace('"', "&quot;");
        assert!(body.contains(&says), "{path} should say {says:?}: {body}");
    }
    let (_, _, body) = get(&app, &format!("/scheduler/leases?q={}", "a".repeat(2000))).await;
    assert!(body.contains("2000 bytes long"), "{body}");
}

#[tokio::test]
async fn every_list_page_stays_within_200_kb_whatever_the_data() {
    let store = FakeStore::new();
    let big = "y".repeat(100_000);
    {
        let mut s = store.state.lock().unwrap();
        s.leases = (0..2_000)
            .map(|i| lease(&format!("lease-{i:05}-{}", "n".repeat(200)), "node-a", true))
            .collect();
    }
    for i in 0..300 {
        // Names as long as names may be (200 bytes), every character escaped in links.
        let job = format!("{i:03}{}", "&".repeat(197));
        store.add_run(&job, Outcome::Failed, Some(&big));
        store.state.lock().unwrap().runs.last_mut().unwrap().node = big.clone();
        // Texts past today's limits (an older version's, or written by hand) are
        // shown bounded too.
        store.state.lock().unwrap().records.push(ControlRecord {
            id: i + 1,
            at: Utc::now(),
            job,
            node: Some(big.clone()),
            action: ControlAction::Pause,
            by: big.clone(),
            why: big.clone(),
            detail: big.clone(),
        });
    }
    // The app's page size asks for 1,000 rows a page: the lists show at most 100
    // (50 of stored texts).
    let dashboard = Dashboard::new(store.clone()).page_size(1000);
    let app: Router = Router::new().nest("/scheduler", dashboard.router());
    for path in [
        "/scheduler/leases",
        "/scheduler/leases?page=last",
        "/scheduler/failures",
        "/scheduler/audit",
    ] {
        let (status, _, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(body.len() < 200_000, "{path}: {} bytes", body.len());
    }
    let (_, _, body) = get(&app, "/scheduler/leases").await;
    assert_eq!(count_line(&body, "leases"), "1–100 of 2,000, by name");
}

fn instance(
    node: &str,
    live: bool,
    stopped: bool,
    jobs: &[&str],
    handlers: &[&str],
) -> InstanceRow {
    let now = Utc::now();
    InstanceRow {
        node: node.to_owned(),
        version: "1.2.3".to_owned(),
        started_at: now - TimeDelta::hours(1),
        seen_at: now - TimeDelta::seconds(if live { 2 } else { 120 }),
        expires_at: now + TimeDelta::seconds(if live { 28 } else { -90 }),
        stopped,
        handlers: handlers.iter().map(|h| (*h).to_owned()).collect(),
        jobs: jobs.iter().map(|j| (*j).to_owned()).collect(),
    }
}

#[tokio::test]
async fn the_instances_page_says_which_are_live_stopped_or_gone() {
    let store = FakeStore::new();
    store.state.lock().unwrap().instances = vec![
        instance("web-2", false, false, &["sweep"], &[]),
        instance("web-1", true, false, &["sweep", EVIL], &["report"]),
        instance("web-0", false, true, &[], &[]),
    ];
    let app = app(&store, &["sweep"], Actions::default());
    let (status, _, body) = get(&app, "/scheduler/instances").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Live first, then by node.
    assert_eq!(rows(&body, "instance"), ["web-1", "web-0", "web-2"]);
    assert_eq!(count_line(&body, "instances"), "1 live of 3 instances");
    for (node, state) in [("web-1", "live"), ("web-0", "stopped"), ("web-2", "gone")] {
        assert!(
            body.contains(&format!(
                r#"<tr data-instance="{node}" data-state="{state}">"#
            )),
            "{node} {state}: {body}"
        );
    }
    assert!(
        body.contains("1.2.3") && body.contains("<code>report</code>"),
        "{body}"
    );
    assert!(
        body.contains(r#"<a href="./job?name=sweep">sweep</a>"#),
        "{body}"
    );
    assert!(!body.contains("<script>"), "{body}");

    let (status, _, body) = get(&app, "/scheduler/instances?node=web-1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("unknown field `node`"), "{body}");
}

/// The warning of a triggered run's page, if it shows one.
async fn trigger_warning(store: &Arc<FakeStore>, job: &str) -> Option<String> {
    let trigger = store
        .trigger(&ControlRequest::new(job, "test"))
        .await
        .unwrap();
    let app = app(store, &["sweep"], Actions::default());
    let (status, _, body) = get(&app, &format!("/scheduler/trigger?id={}", trigger.id)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let at = body.find("data-warning=\"no-live-instance\"")?;
    Some(body[at..at + body[at..].find("</p>").unwrap()].to_owned())
}

#[tokio::test]
async fn a_triggered_run_no_live_instance_runs_is_warned_of() {
    let store = FakeStore::new();
    // No instance keeps a row (an older version): nothing to tell.
    assert_eq!(trigger_warning(&store, "sweep").await, None);

    // Only a gone instance runs it, a live one runs something else.
    store.state.lock().unwrap().instances = vec![
        instance("web-1", false, false, &["sweep"], &[]),
        instance("web-2", true, false, &["other"], &["report"]),
    ];
    let warning = trigger_warning(&store, "sweep").await.expect("a warning");
    assert!(
        warning.contains("No live instance runs <code>sweep</code>"),
        "{warning}"
    );
    assert!(
        warning.contains("1 instance is live, none with this job"),
        "{warning}"
    );

    // A dynamic schedule whose handler a live instance runs: no warning.
    store.register("report");
    store
        .put_schedule(
            &ScheduleRow::new("tenant-7", "report", "every 1h"),
            "test",
            "",
        )
        .await
        .unwrap();
    assert_eq!(trigger_warning(&store, "tenant-7").await, None);

    // A live instance runs it: none.
    store.state.lock().unwrap().instances[0] = instance("web-1", true, false, &["sweep"], &[]);
    assert_eq!(trigger_warning(&store, "sweep").await, None);

    // Every instance stopped: said so.
    for i in &mut store.state.lock().unwrap().instances {
        i.stopped = true;
    }
    let warning = trigger_warning(&store, "sweep").await.expect("a warning");
    assert!(warning.contains("No instance is live at all"), "{warning}");
}
