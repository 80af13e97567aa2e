#![allow(clippy::expect_used, clippy::unwrap_used)]
//! What the dashboard refuses before acting, each in words on its own page: a
//! read-only dashboard's `POST` (before its body is read), an address whose query
//! it does not understand, a reason or an actor over 1 KiB, a body over 64 KiB.

mod support;

use axum::Extension;
use axum::http::{StatusCode, header};
use scheduler_web::{Actions, Actor};
use support::{FakeStore, app, csrf, get, post};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A refusal is the dashboard's own page: HTML, the message in an alert, none of
/// axum's plain-text rejections.
fn is_a_page_in_words(res: &axum::http::Response<()>, body: &str) -> bool {
    res.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/html")
        && body.contains("role=\"alert\"")
        && !body.contains("Failed to")
}

#[tokio::test]
async fn read_only_refuses_before_the_body_is_read() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A client that waits for `100 Continue` before it sends its 5 MB.
    conn.write_all(
        b"POST /scheduler/pause HTTP/1.1\r\nHost: localhost\r\n\
          Content-Type: application/x-www-form-urlencoded\r\n\
          Content-Length: 5000000\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("an answer without the body")
            .unwrap();
        assert_ne!(n, 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    server.abort();
    assert!(store.records().is_empty());
}

#[tokio::test]
async fn a_query_it_does_not_understand_is_a_400_in_words() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    for path in [
        "/scheduler/job",
        "/scheduler/job?runs_before=3",
        "/scheduler/job?name=sweep&name=sweep",
        "/scheduler/job?name=sweep&runs_before=yesterday",
        "/scheduler/trigger?id=abc",
        "/scheduler/trigger",
        "/scheduler/jobs?schedules_after=a&schedules_after=b",
        "/scheduler/schedule?name=a&name=b",
    ] {
        let (status, res, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(is_a_page_in_words(&res, &body), "{path}: {body}");
        assert!(body.contains("address"), "{path}: {body}");
        assert!(
            res.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("default-src 'none'"),
            "{path}"
        );
    }
    // The page's own example of a good address.
    let (_, _, body) = get(&app, "/scheduler/trigger?id=abc").await;
    assert!(body.contains("trigger?id="), "{body}");
}

#[tokio::test]
async fn a_reason_over_1_kib_is_refused_in_words() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = csrf(&app).await;
    let long = "x".repeat(1025);
    for path in ["pause", "resume", "trigger", "remove-schedule"] {
        let fields = [("name", "sweep"), ("csrf", &token), ("why", &long)];
        let (status, res, body) =
            post(&app, &format!("/scheduler/{path}"), &fields, Some(&cookie)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(is_a_page_in_words(&res, &body), "{path}: {body}");
        assert!(body.contains("1 KiB"), "{path}: {body}");
    }
    let fields = [
        ("name", "nightly"),
        ("handler", "report"),
        ("schedule", "every 1h"),
        ("csrf", &token),
        ("why", &long),
    ];
    let (status, _, body) = post(&app, "/scheduler/schedule", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("1 KiB"), "{body}");
    assert!(store.records().is_empty(), "{:?}", store.records());
    // 1 KiB itself is kept.
    let fits = "y".repeat(1024);
    let fields = [("name", "sweep"), ("csrf", &token), ("why", &fits)];
    let (status, _, body) = post(&app, "/scheduler/pause", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(store.records()[0].why, fits);
}

#[tokio::test]
async fn an_actor_over_1_kib_is_refused_in_words() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled())
        .layer(Extension(Actor(format!("web:{}", "a".repeat(2000)))));
    let (cookie, token) = csrf(&app).await;
    let fields = [("name", "sweep"), ("csrf", token.as_str())];
    let (status, res, body) = post(&app, "/scheduler/pause", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(is_a_page_in_words(&res, &body), "{body}");
    assert!(body.contains("1 KiB"), "{body}");
    assert!(store.records().is_empty());
}

#[tokio::test]
async fn a_body_over_64_kib_is_refused_in_words() {
    let store = FakeStore::new();
    store.register("report");
    let app = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = csrf(&app).await;
    let args = format!("{{\"pad\": \"{}\"}}", "p".repeat(70 * 1024));
    let fields = [
        ("name", "nightly"),
        ("handler", "report"),
        ("schedule", "every 1h"),
        ("args", &args),
        ("csrf", &token),
    ];
    let (status, res, body) = post(&app, "/scheduler/schedule", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(is_a_page_in_words(&res, &body), "{body}");
    assert!(body.contains("64 KiB"), "{body}");
    assert!(store.records().is_empty());
}

/// The schedule form's fields for `schedule` in `zone`.
async fn put_schedule(
    app: &axum::Router,
    schedule: &str,
    zone: &str,
) -> (StatusCode, axum::http::Response<()>, String) {
    let (cookie, token) = csrf(app).await;
    let fields = [
        ("name", "nightly"),
        ("handler", "report"),
        ("schedule", schedule),
        ("zone", zone),
        ("csrf", &token),
    ];
    post(app, "/scheduler/schedule", &fields, Some(&cookie)).await
}

#[tokio::test]
async fn a_schedule_more_often_than_a_second_is_refused_in_words() {
    let store = FakeStore::new();
    store.register("report");
    let app = app(&store, &["sweep"], Actions::enabled());
    for every in ["every 1ms", "every 999ms"] {
        let (status, res, body) = put_schedule(&app, every, "").await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{every}: {body}");
        assert!(is_a_page_in_words(&res, &body), "{body}");
        assert!(body.contains("at least every 1s"), "{body}");
        // The form again, filled in.
        assert!(body.contains(&format!("value=\"{every}\"")), "{body}");
    }
    assert!(store.records().is_empty());
    let (status, _, body) = put_schedule(&app, "every 1s", "").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
}

#[tokio::test]
async fn the_app_may_lower_the_minimum_period() {
    let store = FakeStore::new();
    store.register("report");
    // The store's minimum too: its check is the one that holds.
    *store.min_period.lock().unwrap() = Some(std::time::Duration::from_millis(100));
    let dashboard = scheduler_web::Dashboard::new(store.clone())
        .jobs(support::jobs(&store, &["sweep"]))
        .actions(Actions::enabled())
        .min_period(std::time::Duration::from_millis(100));
    let app = axum::Router::new().nest("/scheduler", dashboard.router());
    let (status, _, body) = put_schedule(&app, "every 50ms", "").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("at least every 100ms"), "{body}");
    let (status, _, body) = put_schedule(&app, "every 100ms", "").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
}

#[tokio::test]
async fn a_zone_with_an_every_schedule_is_refused_in_words() {
    let store = FakeStore::new();
    store.register("report");
    let app = app(&store, &["sweep"], Actions::enabled());
    let (status, res, body) = put_schedule(&app, "every 1h", "Europe/Berlin").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(is_a_page_in_words(&res, &body), "{body}");
    assert!(body.contains("time zone"), "{body}");
    assert!(store.records().is_empty());
    // A cron expression reads its zone.
    let (status, _, body) = put_schedule(&app, "0 0 3 * * *", "Europe/Berlin").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
}

/// The store's minimum holds under a dashboard whose own is lower: its refusal is a
/// `422` in its words (not a `500`), and nothing is stored.
#[tokio::test]
async fn the_stores_minimum_period_holds_under_a_lower_dashboard_minimum() {
    let store = FakeStore::new();
    store.register("report");
    let dashboard = scheduler_web::Dashboard::new(store.clone())
        .jobs(support::jobs(&store, &["sweep"]))
        .actions(Actions::enabled())
        .min_period(std::time::Duration::from_millis(100));
    let app = axum::Router::new().nest("/scheduler", dashboard.router());
    let (status, res, body) = put_schedule(&app, "every 100ms", "").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(is_a_page_in_words(&res, &body), "{body}");
    assert!(
        body.contains("more often than this store accepts (at least every 1s)"),
        "{body}"
    );
    assert!(store.records().is_empty());
}

/// A trigger of a paused job the form says to run all the same is recorded as such.
#[tokio::test]
async fn a_trigger_while_paused_is_recorded_as_such() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let pause = scheduler_core::ControlRequest::new("sweep", "cli:bob").why("deploy");
    scheduler_core::Controls::pause(&*store, &pause)
        .await
        .unwrap();
    let (cookie, token) = csrf(&app).await;
    let fields = [
        ("name", "sweep"),
        ("csrf", token.as_str()),
        ("while_paused", "yes"),
    ];
    let (status, _, body) = post(&app, "/scheduler/trigger", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let newest = store.records().pop().unwrap();
    assert_eq!(
        newest.action,
        scheduler_core::ControlAction::TriggerWhilePaused
    );
    let (_, _, history) = get(&app, "/scheduler/job?name=sweep").await;
    assert!(history.contains("trigger_while_paused"), "{history}");
}
