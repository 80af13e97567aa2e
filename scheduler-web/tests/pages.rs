#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The pages, through the router an app nests: status codes, relative links under
//! any prefix, escaping of everything read from the store, and paged histories.

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::http::{StatusCode, header};
use scheduler_core::{ControlRequest, Controls as _, MemoryStore, Outcome, ScheduleRow};
use scheduler_web::{Actions, Dashboard};
use support::{FakeStore, app, get};

#[tokio::test]
async fn the_prefix_redirects_to_the_jobs_page_next_to_it() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::default());
    let (status, res, _) = get(&app, "/scheduler").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[header::LOCATION], "./scheduler/jobs");

    // Nested with a trailing slash, or deeper, the redirect still lands on `jobs`.
    let dashboard = || Dashboard::new(store.clone()).jobs(support::jobs(&store, &["sweep"]));
    let deeper: Router = Router::new().nest("/ops/tools/", dashboard().router());
    let (status, res, _) = get(&deeper, "/ops/tools/").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[header::LOCATION], "./jobs");
    let (status, _, body) = get(&deeper, "/ops/tools/jobs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("sweep"));
}

#[tokio::test]
async fn every_page_answers_200_with_relative_links_only() {
    let store = FakeStore::new();
    store.add_run("sweep", Outcome::Succeeded, None);
    store.add_lease("sweep", Some("node-a:42:00ff00ff00ff00ff"));
    let trigger = store
        .trigger(&ControlRequest::new("sweep", "test"))
        .await
        .unwrap();
    let app = app(&store, &["sweep"], Actions::enabled());
    for path in [
        "/scheduler/jobs",
        "/scheduler/leases",
        "/scheduler/failures",
        "/scheduler/audit",
        "/scheduler/job?name=sweep",
        &format!("/scheduler/trigger?id={}", trigger.id),
        "/scheduler/schedule",
    ] {
        let (status, res, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert!(
            res.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{path}"
        );
        assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store", "{path}");
        let csp = res.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
        for attr in [" href=\"", " action=\""] {
            for link in body.split(attr).skip(1) {
                assert!(
                    link.starts_with("./"),
                    "{path}: a link that is not relative: {link:.60}"
                );
            }
        }
    }
    let (_, _, leases) = get(&app, "/scheduler/leases").await;
    assert!(
        leases.contains("<strong>node-a</strong>"),
        "the holder's node: {leases}"
    );
}

#[tokio::test]
async fn unknown_jobs_triggers_and_pages_are_404() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    for path in [
        "/scheduler/job?name=nope",
        "/scheduler/trigger?id=99",
        "/scheduler/schedule?name=nope",
        "/scheduler/nothing-here",
    ] {
        let (status, _, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            body.contains("role=\"alert\""),
            "{path}: the reason in words: {body}"
        );
    }
    let (_, _, body) = get(&app, "/scheduler/job?name=nope").await;
    assert!(body.contains("no job named &quot;nope&quot;"), "{body}");
    // A bad query is the request's fault.
    let (status, _, _) = get(&app, "/scheduler/trigger?id=seven").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_job_gone_from_the_code_keeps_its_history_page() {
    let store = FakeStore::new();
    store.add_run("retired", Outcome::Succeeded, None);
    let app = app(&store, &["sweep"], Actions::default());
    let (status, _, body) = get(&app, "/scheduler/job?name=retired").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("its history only"), "{body}");
}

#[tokio::test]
async fn names_errors_and_reasons_are_shown_as_text() {
    const EVIL: &str = "<script>alert(1)</script>";
    let store = FakeStore::new();
    store.add_run(EVIL, Outcome::Failed, Some("<img src=x onerror=alert(2)>"));
    store.add_lease(EVIL, Some("<b>node</b>:1:00ff"));
    store
        .pause(&ControlRequest::new(EVIL, "<i>mallory</i>").why("\"><script>alert(3)</script>"))
        .await
        .unwrap();
    store.register("h");
    let mut row = ScheduleRow::new("dyn<script>", "h", "every 1m");
    row.args = r#"{"q": "</code><script>alert(4)</script>"}"#.to_owned();
    store.put_schedule(&row, "test", "").await.unwrap();
    let app = app(&store, &[EVIL], Actions::enabled());

    for path in [
        "/scheduler/jobs".to_owned(),
        "/scheduler/leases".to_owned(),
        format!(
            "/scheduler/job?name={}",
            "%3Cscript%3Ealert(1)%3C%2Fscript%3E"
        ),
        "/scheduler/schedule?name=dyn%3Cscript%3E".to_owned(),
    ] {
        let (status, _, body) = get(&app, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            !body.contains("<script"),
            "{path}: unescaped markup: {body}"
        );
        assert!(!body.contains("<img"), "{path}");
        assert!(!body.contains("<b>node"), "{path}");
        assert!(!body.contains("<i>mallory"), "{path}");
    }
    let (_, _, jobs) = get(&app, "/scheduler/jobs").await;
    assert!(
        jobs.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{jobs}"
    );
    assert!(jobs.contains("&lt;img src=x onerror=alert(2)&gt;"));
    assert!(jobs.contains("&lt;i&gt;mallory&lt;/i&gt;"));
    // The name travels encoded in links, never raw.
    assert!(
        jobs.contains("./job?name=%3Cscript%3Ealert%281%29%3C%2Fscript%3E"),
        "{jobs}"
    );
}

#[tokio::test]
async fn read_only_pages_have_no_forms_and_set_no_cookie() {
    let store = FakeStore::new();
    store.add_run("sweep", Outcome::Succeeded, None);
    let app = app(&store, &["sweep"], Actions::default());
    for path in [
        "/scheduler/jobs",
        "/scheduler/job?name=sweep",
        "/scheduler/leases",
        "/scheduler/failures",
        "/scheduler/audit",
    ] {
        let (status, res, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK);
        // No action form; the list pages' filters are GET forms that change nothing.
        assert!(!body.contains("method=\"post\""), "{path}: {body}");
        assert!(res.headers().get(header::SET_COOKIE).is_none(), "{path}");
        assert!(body.contains("read-only"), "{path}");
    }
}

#[tokio::test]
async fn runs_and_controls_are_paged_newest_first() {
    let store = FakeStore::new();
    for _ in 0..7 {
        store.add_run("sweep", Outcome::Succeeded, None);
    }
    for i in 0..4 {
        store
            .pause(&ControlRequest::new("sweep", format!("op{i}")))
            .await
            .unwrap();
    }
    store.add_run("other", Outcome::Succeeded, None);
    // Page size 3 (support::app).
    let app = app(&store, &["sweep", "other"], Actions::default());
    let runs = |body: &str| -> Vec<i64> {
        body.split("data-run=\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap().parse().unwrap())
            .collect()
    };
    let older = |body: &str, page: &str| -> Option<String> {
        let marker = format!("data-page=\"{page}\"");
        let i = body.find(&marker)?;
        let start = body[..i].rfind("href=\"")? + 6;
        let link = body[start..].split('"').next()?.replace("&amp;", "&");
        Some(format!("/scheduler/{}", link.trim_start_matches("./")))
    };

    let (_, _, first) = get(&app, "/scheduler/job?name=sweep").await;
    assert_eq!(runs(&first), [7, 6, 5]);
    let next = older(&first, "older-runs").expect("an older page");
    assert_eq!(next, "/scheduler/job?name=sweep&runs_before=5");
    let (_, _, second) = get(&app, &next).await;
    assert_eq!(runs(&second), [4, 3, 2]);
    assert!(second.contains("data-page=\"newest-runs\""));
    let (_, _, third) = get(&app, &older(&second, "older-runs").unwrap()).await;
    assert_eq!(runs(&third), [1]);
    assert_eq!(older(&third, "older-runs"), None);

    let controls = |body: &str| body.matches("data-control=\"").count();
    assert_eq!(controls(&first), 3);
    let (_, _, more) = get(&app, &older(&first, "older-controls").unwrap()).await;
    assert_eq!(controls(&more), 1);
    assert!(more.contains("op0") && !more.contains("op3"));
}

#[tokio::test]
async fn dynamic_schedules_are_listed_a_page_at_a_time() {
    let store = FakeStore::new();
    store.register("report");
    for c in ["g", "c", "a", "e", "b", "f", "d"] {
        let row = ScheduleRow::new(format!("dyn-{c}"), "report", "every 1m");
        store.put_schedule(&row, "test", "").await.unwrap();
    }
    store
        .pause(&ControlRequest::new("dyn-b", "ops").why("flaky upstream"))
        .await
        .unwrap();
    store
        .trigger(&ControlRequest::new("sweep", "ops"))
        .await
        .unwrap();
    // Page size 3 (support::app); read-only, so only the table's rows name a job.
    let app = app(&store, &["sweep"], Actions::default());
    let listed = |body: &str| -> Vec<String> {
        body.split("data-job=\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap().to_owned())
            .filter(|name| name.starts_with("dyn-"))
            .collect()
    };
    let more = |body: &str| -> Option<String> {
        let i = body.find("data-page=\"next\"")?;
        let start = body[..i].rfind("href=\"")? + 6;
        let link = body[start..].split('"').next()?.replace("&amp;", "&");
        Some(format!("/scheduler/{}", link.trim_start_matches("./")))
    };

    let (status, _, first) = get(&app, "/scheduler/jobs").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(listed(&first), ["dyn-a", "dyn-b", "dyn-c"]);
    assert!(first.contains("flaky upstream"), "dyn-b's pause: {first}");
    assert!(
        first.contains("Triggered runs not yet done"),
        "the open trigger: {first}"
    );
    let next = more(&first).expect("a next page");
    assert_eq!(next, "/scheduler/jobs?after=dyn-c&at=4");
    let (_, _, second) = get(&app, &next).await;
    assert_eq!(listed(&second), ["dyn-d", "dyn-e", "dyn-f"]);
    let (_, _, third) = get(&app, &more(&second).expect("a last page")).await;
    assert_eq!(listed(&third), ["dyn-g"]);
    assert_eq!(more(&third), None);

    let (status, _, job) = get(&app, "/scheduler/job?name=dyn-b").await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert!(
        job.contains("report") && job.contains("flaky upstream"),
        "{job}"
    );

    // Every page read what it shows, never every schedule.
    assert_eq!(store.full_reads.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_store_without_controls_still_shows_its_jobs() {
    let store = Arc::new(support::NoControls(MemoryStore::new()));
    let jobs = scheduler_core::Scheduler::builder(store.clone())
        .job(support::Noop {
            name: "sweep".into(),
            every: std::time::Duration::from_secs(5),
        })
        .build()
        .unwrap()
        .jobs();
    let app: Router = Router::new().nest("/s", Dashboard::new(store).jobs(jobs).router());
    let (status, _, body) = get(&app, "/s/jobs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("sweep") && body.contains("every 5 s"),
        "{body}"
    );
    assert!(body.contains("keeps no controls"), "{body}");
    let (status, _, _) = get(&app, "/s/job?name=sweep").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = get(&app, "/s/leases").await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{body}");
}

#[tokio::test]
async fn an_app_with_its_own_state_nests_it() {
    #[derive(Clone)]
    struct AppState {
        greeting: &'static str,
    }
    let store = FakeStore::new();
    let app: Router = Router::new()
        .route(
            "/hello",
            axum::routing::get(
                |axum::extract::State(s): axum::extract::State<AppState>| async move { s.greeting },
            ),
        )
        .nest("/ops/scheduler", Dashboard::new(store.clone()).router())
        .with_state(AppState { greeting: "hi" });
    let (status, _, body) = get(&app, "/hello").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "hi"));
    let (status, res, _) = get(&app, "/ops/scheduler").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[header::LOCATION], "./scheduler/jobs");
    let (status, _, _) = get(&app, "/ops/scheduler/jobs").await;
    assert_eq!(status, StatusCode::OK);
}
