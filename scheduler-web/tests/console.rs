#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The operators' console: the summary header, the refresh choice, the jobs page's
//! filters, search and paging, times in each job's zone, the job page's chart, and
//! the address with a trailing slash.

mod support;

use std::sync::atomic::Ordering;

use axum::Router;
use axum::http::{StatusCode, header};
use chrono::{TimeDelta, Utc};
use scheduler_core::{ControlRequest, Controls as _, LeaseRow, Outcome, ScheduleRow};
use scheduler_web::{Actions, Dashboard};
use support::{FakeStore, app, get, post};

/// Mounted under `/admin/scheduler` as the docs say, the address with a trailing
/// slash reaches the dashboard (axum's `nest` of a router leaves `/prefix/` to the
/// app's fallback: an empty 404).
#[tokio::test]
async fn the_prefix_with_a_trailing_slash_leads_to_the_jobs_page() {
    let store = FakeStore::new();
    let app: Router = Router::new().merge(Dashboard::new(store.clone()).mount("/admin/scheduler"));
    let (status, res, body) = get(&app, "/admin/scheduler/").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(res.headers()[header::LOCATION], "./jobs");
    let (status, res, _) = get(&app, "/admin/scheduler").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[header::LOCATION], "./scheduler/jobs");
    let (status, _, _) = get(&app, "/admin/scheduler/jobs").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = get(&app, "/admin/scheduler/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("no such page"), "{body}");
}

/// A job another instance registered (not in this dashboard's `jobs`) is known to
/// the store, and may be paused from the dashboard.
#[tokio::test]
async fn a_job_registered_by_another_instance_is_controlled() {
    let store = FakeStore::new();
    store
        .register_jobs("node-b", &["elsewhere".to_owned()])
        .await
        .unwrap();
    let app = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = support::csrf(&app).await;
    let fields = [("csrf", token.as_str()), ("name", "elsewhere")];
    let (status, _, body) = post(&app, "/scheduler/pause", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(store.paused().len(), 1);
    // A typo is still refused.
    let fields = [("csrf", token.as_str()), ("name", "elsewher")];
    let (status, _, _) = post(&app, "/scheduler/pause", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// The hrefs of a page, `&amp;` read as `&`.
fn hrefs(body: &str) -> Vec<String> {
    body.split(" href=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().replace("&amp;", "&"))
        .collect()
}

#[tokio::test]
async fn a_refresh_is_chosen_by_link_and_kept_across_the_pages() {
    let store = FakeStore::new();
    let trigger = store
        .trigger(&ControlRequest::new("sweep", "test"))
        .await
        .unwrap();
    let app = app(&store, &["sweep"], Actions::default());

    let (status, _, off) = get(&app, "/scheduler/jobs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!off.contains("http-equiv=\"refresh\""), "off by default");
    let links = hrefs(&off);
    for choice in ["./jobs?refresh=5", "./jobs?refresh=15", "./jobs?refresh=60"] {
        assert!(
            links.iter().any(|l| l == choice),
            "{choice} offered: {links:?}"
        );
    }

    let (status, _, on) = get(&app, "/scheduler/jobs?refresh=5").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        on.contains(r#"<meta http-equiv="refresh" content="5">"#),
        "{on}"
    );
    let links = hrefs(&on);
    for nav in ["./jobs", "./leases", "./failures", "./audit", "./instances"] {
        let kept = format!("{nav}?refresh=5");
        assert!(
            links.contains(&kept),
            "the nav keeps the refresh: {kept} in {links:?}"
        );
    }
    // The choice "off" leads back to the page without it.
    assert!(links.iter().any(|l| l == "./jobs"), "{links:?}");
    // A page with filters keeps them in its refresh choices.
    let (_, _, filtered) = get(&app, "/scheduler/job?name=sweep&refresh=15").await;
    assert!(filtered.contains(r#"content="15""#));
    assert!(
        hrefs(&filtered)
            .iter()
            .any(|l| l == "./job?name=sweep&refresh=60"),
        "{filtered}"
    );

    // The trigger's own refresh still works, and the sooner one wins.
    let (_, _, page) = get(&app, &format!("/scheduler/trigger?id={}", trigger.id)).await;
    assert!(page.contains(r#"content="2""#), "{page}");
    let (_, _, page) = get(
        &app,
        &format!("/scheduler/trigger?id={}&refresh=60", trigger.id),
    )
    .await;
    assert!(page.contains(r#"content="2""#), "{page}");

    for bad in ["7", "0", "soon", "-5"] {
        let (status, _, body) = get(&app, &format!("/scheduler/jobs?refresh={bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "refresh={bad}");
        assert!(body.contains("one of 5, 15, 60"), "in words: {body}");
    }
}

/// The names of the jobs listed, in order (rows of both tables).
fn listed(body: &str) -> Vec<String> {
    body.split("<tr data-job=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().to_owned())
        .collect()
}

/// The link marked `data-page="{page}"`, as a path under `/scheduler/`.
fn page_link(body: &str, page: &str) -> Option<String> {
    let i = body.find(&format!("data-page=\"{page}\""))?;
    let start = body[..i].rfind("href=\"")? + 6;
    let link = body[start..].split('"').next()?.replace("&amp;", "&");
    Some(format!("/scheduler/{}", link.trim_start_matches("./")))
}

/// What the pager says (`1–3 of 7 schedules`).
fn position(body: &str) -> String {
    let i = body.find("data-position").expect("a pager");
    let text = &body[i..];
    let text = &text[text.find('>').unwrap() + 1..];
    text.split("</span>").next().unwrap().to_owned()
}

async fn put(store: &FakeStore, name: &str, schedule: &str, zone: Option<&str>) {
    let mut row = ScheduleRow::new(name, "report", schedule);
    row.zone = zone.map(str::to_owned);
    store.put_schedule(&row, "test", "").await.unwrap();
}

fn lease(store: &FakeStore, name: &str, holder: &str, tick_ago: i64, held: bool) {
    let now = Utc::now();
    store.state.lock().unwrap().leases.push(LeaseRow {
        name: name.to_owned(),
        holder: Some(holder.to_owned()),
        tick: now - TimeDelta::seconds(tick_ago),
        token: 1,
        expires_at: if held {
            now + TimeDelta::seconds(30)
        } else {
            now - TimeDelta::seconds(1)
        },
        released_at: (!held).then_some(now - TimeDelta::seconds(1)),
    });
}

/// Two jobs in code, three schedules; one paused, one running, one failing.
async fn cluster() -> (std::sync::Arc<FakeStore>, Router) {
    let store = FakeStore::new();
    store.register("report");
    for name in ["rep-a", "rep-b", "other"] {
        put(&store, name, "every 1m", None).await;
    }
    store
        .pause(&ControlRequest::new("rep-b", "ops").why("upstream down"))
        .await
        .unwrap();
    lease(&store, "sweep", "node-a:1:00ff", 1, true);
    lease(&store, "rep-a", "node-b:1:00ff", 1, false);
    store.add_run("beat", Outcome::Failed, Some("boom"));
    let app = app(&store, &["sweep", "beat"], Actions::default());
    (store, app)
}

#[tokio::test]
async fn the_header_counts_jobs_paused_running_and_failing() {
    let (store, app) = cluster().await;
    for path in [
        "/scheduler/jobs",
        "/scheduler/job?name=sweep",
        "/scheduler/leases",
    ] {
        let (status, _, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        for (count, words, href) in [
            ("jobs", "<b>5</b> jobs", "./jobs"),
            ("paused", "<b>1</b> paused", "./jobs?state=paused"),
            ("running", "<b>1</b> running", "./jobs?state=running"),
            ("failing", "<b>1</b> failing", "./jobs?state=failing"),
        ] {
            let at = body
                .find(&format!("data-count=\"{count}\""))
                .unwrap_or_else(|| panic!("{path}: no {count} count: {body}"));
            let tag_start = body[..at].rfind("<a ").unwrap();
            let tag = &body[tag_start..at + 200];
            assert!(tag.contains(&format!("href=\"{href}\"")), "{path}: {tag}");
            assert!(tag.contains(words), "{path}: {tag}");
        }
    }
    // Counted, never read in full.
    assert_eq!(store.full_reads.load(Ordering::Relaxed), 0);
}

/// The paused count in the header of `/jobs`.
async fn paused_count(app: &Router) -> String {
    let (status, _, body) = get(app, "/scheduler/jobs").await;
    assert_eq!(status, StatusCode::OK);
    let at = body.find("data-count=\"paused\"").unwrap();
    body[at..]
        .split("<b>")
        .nth(1)
        .unwrap()
        .split("</b>")
        .next()
        .unwrap()
        .to_owned()
}

/// The header's counts are read at most once per `counts_max_age` (four reads of
/// the store on every page cost more than the page at 100,000 schedules); an
/// action through the dashboard has them read again on the next page; with
/// `Duration::ZERO` every page reads them.
#[tokio::test]
async fn the_header_counts_are_kept_a_moment_and_read_again_after_an_action() {
    let (store, _) = cluster().await;
    let dashboard = |max_age| {
        let d = Dashboard::new(store.clone())
            .jobs(support::jobs(&store, &["sweep", "beat"]))
            .actions(Actions::enabled())
            .counts_max_age(max_age);
        Router::new().nest("/scheduler", d.router())
    };
    let kept = dashboard(std::time::Duration::from_secs(3600));
    let every = dashboard(std::time::Duration::ZERO);
    assert_eq!(paused_count(&kept).await, "1");
    assert_eq!(paused_count(&every).await, "1");
    store
        .pause(&ControlRequest::new("rep-a", "ops"))
        .await
        .unwrap();
    assert_eq!(paused_count(&kept).await, "1", "kept from a moment ago");
    assert_eq!(paused_count(&every).await, "2", "read on every page");
    // An action (even one refused: its effect is not judged) forgets them.
    let (status, _, _) = post(&kept, "/scheduler/pause", &[("job", "other")], None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(paused_count(&kept).await, "2", "read again after a POST");
}

#[tokio::test]
async fn the_jobs_are_filtered_by_state_handler_node_and_name() {
    let (store, app) = cluster().await;
    store.register("mail");
    let mut row = ScheduleRow::new("mailer", "mail", "every 1m");
    row.args = "{}".into();
    store.put_schedule(&row, "test", "").await.unwrap();
    let cases: [(&str, &[&str]); 9] = [
        // Page size 3 (support::app): the first three schedules.
        ("", &["sweep", "beat", "mailer", "other", "rep-a"]),
        ("?state=paused", &["rep-b"]),
        ("?state=running", &["sweep"]),
        ("?state=failing", &["beat"]),
        ("?handler=mail", &["mailer"]),
        ("?node=node-b", &["rep-a"]),
        ("?q=REP", &["rep-a", "rep-b"]),
        ("?q=e&state=paused", &["rep-b"]),
        ("?q=nothing-like-it", &[]),
    ];
    for (query, expected) in cases {
        let (status, _, body) = get(&app, &format!("/scheduler/jobs{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        assert_eq!(listed(&body), expected, "{query}");
    }
    // The form shows the filters it was given.
    let (_, _, body) = get(&app, "/scheduler/jobs?q=rep&state=paused&refresh=15").await;
    assert!(body.contains(r#"name="q" value="rep""#), "{body}");
    assert!(
        body.contains(r#"<option value="paused" selected>"#),
        "{body}"
    );
    assert!(
        body.contains(r#"name="refresh" value="15""#),
        "the refresh kept: {body}"
    );
    let (status, _, body) = get(&app, "/scheduler/jobs?state=stuck").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("failing, paused, late or running"), "{body}");
}

#[tokio::test]
async fn a_late_job_is_one_whose_next_tick_was_not_taken() {
    let store = FakeStore::new();
    // Every 30 s (support's jobs): `stuck` last took a tick 10 min ago, `fresh` 5 s ago,
    // `held-up` is late but paused.
    lease(&store, "stuck", "node-a:1:00ff", 600, false);
    lease(&store, "fresh", "node-a:1:00ff", 5, false);
    lease(&store, "held-up", "node-a:1:00ff", 600, false);
    store
        .pause(&ControlRequest::new("held-up", "ops"))
        .await
        .unwrap();
    let app = app(
        &store,
        &["stuck", "fresh", "held-up", "never"],
        Actions::default(),
    );
    let (_, _, body) = get(&app, "/scheduler/jobs?state=late").await;
    assert_eq!(listed(&body), ["stuck"], "{body}");
    assert!(
        body.contains("was due more than 1 min ago"),
        "defined on the page: {body}"
    );
    let (_, _, all) = get(&app, "/scheduler/jobs").await;
    assert_eq!(all.matches("data-badge=\"late\"").count(), 1, "{all}");
}

#[tokio::test]
async fn the_schedules_are_paged_both_ways_with_their_total() {
    let store = FakeStore::new();
    store.register("report");
    for c in ["g", "c", "a", "e", "b", "f", "d"] {
        put(&store, &format!("dyn-{c}"), "every 1m", None).await;
    }
    put(&store, "zz-other", "every 1m", None).await;
    // Page size 3; the search keeps the seven `dyn-`, and every link keeps it.
    let app = app(&store, &[], Actions::default());
    let (_, _, first) = get(&app, "/scheduler/jobs?q=dyn&refresh=60").await;
    assert_eq!(listed(&first), ["dyn-a", "dyn-b", "dyn-c"]);
    assert_eq!(position(&first), "1–3 of 7 schedules");
    assert_eq!(page_link(&first, "previous"), None);
    let next = page_link(&first, "next").unwrap();
    assert_eq!(next, "/scheduler/jobs?q=dyn&after=dyn-c&at=4&refresh=60");
    let (_, _, second) = get(&app, &next).await;
    assert_eq!(listed(&second), ["dyn-d", "dyn-e", "dyn-f"]);
    assert_eq!(position(&second), "4–6 of 7 schedules");
    let (_, _, back) = get(&app, &page_link(&second, "previous").unwrap()).await;
    assert_eq!(listed(&back), ["dyn-a", "dyn-b", "dyn-c"]);
    assert_eq!(position(&back), "1–3 of 7 schedules");

    let last = page_link(&first, "last").unwrap();
    assert_eq!(last, "/scheduler/jobs?q=dyn&page=last&refresh=60");
    let (_, _, last) = get(&app, &last).await;
    assert_eq!(listed(&last), ["dyn-e", "dyn-f", "dyn-g"]);
    assert_eq!(position(&last), "5–7 of 7 schedules");
    assert_eq!(page_link(&last, "next"), None);
    let (_, _, before) = get(&app, &page_link(&last, "previous").unwrap()).await;
    assert_eq!(listed(&before), ["dyn-b", "dyn-c", "dyn-d"]);
    assert_eq!(position(&before), "2–4 of 7 schedules");
    let (_, _, start) = get(&app, &page_link(&before, "first").unwrap()).await;
    assert_eq!(listed(&start), ["dyn-a", "dyn-b", "dyn-c"]);
    assert_eq!(store.full_reads.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn times_are_in_the_jobs_zone_with_utc_beside() {
    let store = FakeStore::new();
    store.register("report");
    put(&store, "berlin", "0 0 9 * * *", Some("Europe/Berlin")).await;
    store.add_run("berlin", Outcome::Succeeded, None);
    let app = app(&store, &["sweep"], Actions::default());
    let (_, _, jobs) = get(&app, "/scheduler/jobs").await;
    let row = |name: &str| -> String {
        let i = jobs.find(&format!("<tr data-job=\"{name}\"")).unwrap();
        jobs[i..].split("</tr>").next().unwrap().to_owned()
    };
    let berlin = row("berlin");
    assert!(
        berlin.contains(" 09:00:00 CET") || berlin.contains(" 09:00:00 CEST"),
        "the next tick in Berlin: {berlin}"
    );
    assert!(
        berlin.contains("08:00:00 UTC") || berlin.contains("07:00:00 UTC"),
        "UTC beside: {berlin}"
    );
    // A job without a zone: UTC only.
    let sweep = row("sweep");
    assert!(
        sweep.contains(" UTC</time>") && !sweep.contains(" UTC</span>"),
        "{sweep}"
    );
    let (_, _, page) = get(&app, "/scheduler/job?name=berlin").await;
    let runs = &page[page.find("data-run=").unwrap()..];
    assert!(runs.contains("CET") || runs.contains("CEST"), "{runs}");
    assert!(runs.contains(" UTC"), "{runs}");
}

#[tokio::test]
async fn the_job_page_charts_its_runs_as_escaped_svg() {
    let store = FakeStore::new();
    store.add_run("sweep", Outcome::Succeeded, None);
    store.add_run("sweep", Outcome::Failed, Some("<script>alert(1)</script>"));
    let app = app(&store, &["sweep"], Actions::default());
    let (status, res, page) = get(&app, "/scheduler/job?name=sweep").await;
    assert_eq!(status, StatusCode::OK);
    let svg = &page[page.find("<svg").expect("an inline chart")..page.find("</svg>").unwrap()];
    assert_eq!(svg.matches("<rect ").count(), 2, "{svg}");
    assert!(
        svg.contains("class=\"ok\"") && svg.contains("class=\"bad\""),
        "{svg}"
    );
    assert!(svg.contains("runs, oldest → newest") && svg.contains("duration"));
    assert!(
        svg.contains("&lt;script&gt;") && !page.contains("<script"),
        "{svg}"
    );
    // Nothing the policy would block: no script, no external reference.
    assert!(!svg.contains("href") && !svg.contains("<image"));
    let csp = res.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(csp.starts_with("default-src 'none'; style-src 'unsafe-inline'"));
}

#[tokio::test]
async fn a_caught_up_tick_is_said_apart_from_the_lateness() {
    let store = FakeStore::new();
    // `sweep` runs every 30 s: two runs on time, one that caught up a tick 21 h old.
    store.add_run("sweep", Outcome::Succeeded, None);
    store.add_run("sweep", Outcome::Succeeded, None);
    let id = store.add_run("sweep", Outcome::Succeeded, None);
    {
        let mut s = store.state.lock().unwrap();
        let run = s.runs.iter_mut().find(|r| r.id == id).unwrap();
        run.tick = run.started - TimeDelta::hours(21) - TimeDelta::minutes(27);
    }
    let app = app(&store, &["sweep"], Actions::default());
    for path in ["/scheduler/jobs", "/scheduler/job?name=sweep"] {
        let (_, _, body) = get(&app, path).await;
        assert!(
            body.contains("1 caught up (up to 21 h 27 min late)"),
            "{path}: {body}"
        );
        assert!(body.contains("median 3 ms, max 3 ms"), "{path}: {body}");
        assert!(!body.contains("median 21 h"), "{path}");
    }
}

/// 100,000 schedules and 10,000 leases: every page reads a page of them and
/// their counts, never all of them (what a store's own listing makes cheap).
#[tokio::test]
async fn a_hundred_thousand_schedules_are_read_a_page_at_a_time() {
    let store = FakeStore::new();
    {
        let mut s = store.state.lock().unwrap();
        s.handlers.push("report".into());
        for i in 0..100_000 {
            s.schedules.push(ScheduleRow::new(
                format!("tenant-{i:06}"),
                "report",
                "every 1h",
            ));
        }
    }
    for i in 0..10_000 {
        lease(
            &store,
            &format!("tenant-{:06}", i * 10),
            "node-a:1:00ff",
            30,
            i % 2 == 0,
        );
    }
    let app = app(&store, &["sweep"], Actions::default());
    for path in [
        "/scheduler/jobs",
        "/scheduler/jobs?page=last",
        "/scheduler/jobs?state=running",
        "/scheduler/jobs?state=late",
        "/scheduler/job?name=tenant-000010",
    ] {
        let started = std::time::Instant::now();
        let (status, _, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(body.contains("<b>100,001</b> jobs"), "{path}");
        assert!(body.contains("<b>5,000</b> running"), "{path}");
        println!("{path}: {:?}", started.elapsed());
    }
    let (_, _, last) = get(&app, "/scheduler/jobs?page=last").await;
    assert_eq!(position(&last), "99,998–100,000 of 100,000 schedules");
    assert_eq!(store.full_reads.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_node_filter_composes_with_a_state() {
    let (store, app) = cluster().await;
    lease(&store, "rep-b", "node-b:1:00ff", 1, false);
    let (_, _, body) = get(&app, "/scheduler/jobs?node=node-b").await;
    assert_eq!(listed(&body), ["rep-a", "rep-b"]);
    let (_, _, body) = get(&app, "/scheduler/jobs?node=node-b&state=paused").await;
    assert_eq!(listed(&body), ["rep-b"]);
}
