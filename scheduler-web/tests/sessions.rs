#![allow(clippy::expect_used, clippy::unwrap_used)]
//! CSRF as sessions do it: each browser gets a session cookie of its own, and the
//! forms it is served carry a token signed for that session with the dashboard's
//! key. Replicas given one key accept each other's forms (and so does a restarted
//! one); a token moved to another browser is refused.

mod support;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use scheduler_web::{Actions, Dashboard};
use support::{FakeStore, csrf, get, post, send};

const KEY: &[u8] = b"the key the replicas share, 32 b";

/// One replica of the dashboard of `store`, signing with `key`.
fn replica(store: &Arc<FakeStore>, key: Option<&[u8]>) -> Router {
    let mut dashboard = Dashboard::new(store.clone())
        .jobs(support::jobs(store, &["sweep"]))
        .node("node-a")
        .actions(Actions::enabled());
    if let Some(key) = key {
        dashboard = dashboard.csrf_key(key);
    }
    Router::new().nest("/scheduler", dashboard.router())
}

async fn pause(app: &Router, token: &str, cookie: Option<&str>) -> (StatusCode, String) {
    let (status, _, body) = post(
        app,
        "/scheduler/pause",
        &[("name", "sweep"), ("csrf", token)],
        cookie,
    )
    .await;
    (status, body)
}

#[tokio::test]
async fn replicas_sharing_a_key_accept_each_others_forms() {
    let store = FakeStore::new();
    let a = replica(&store, Some(KEY));
    let b = replica(&store, Some(KEY));
    // The page comes from A, the form goes to B.
    let (cookie, token) = csrf(&a).await;
    let (status, body) = pause(&b, &token, Some(&cookie)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    // B does not replace A's cookie: a page of B keeps the browser's session, and
    // its forms carry the same token.
    let req = Request::get("/scheduler/jobs")
        .header(header::COOKIE, &cookie)
        .body(Body::empty())
        .unwrap();
    let (status, res, page) = send(&b, req).await;
    assert_eq!(status, StatusCode::OK);
    assert!(res.headers().get(header::SET_COOKIE).is_none(), "{res:?}");
    assert!(page.contains(&format!("value=\"{token}\"")), "{page}");
    // A restart with the same key is just another replica.
    let restarted = replica(&store, Some(KEY));
    let (status, body) = pause(&restarted, &token, Some(&cookie)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    // Another key refuses it.
    let other = replica(&store, Some(b"another key, another deployment"));
    let (status, body) = pause(&other, &token, Some(&cookie)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("does not match"), "{body}");
    assert_eq!(store.records().len(), 2);
    // The key never shows in the dashboard's `Debug`.
    let dashboard = Dashboard::new(store.clone()).csrf_key(KEY);
    let debug = format!("{dashboard:?}");
    assert!(!debug.contains("the key the replicas share"), "{debug}");
}

#[tokio::test]
async fn a_token_is_refused_from_another_browser() {
    let store = FakeStore::new();
    let app = replica(&store, None);
    let (cookie_a, token_a) = csrf(&app).await;
    let (cookie_b, token_b) = csrf(&app).await;
    assert_ne!(cookie_a, cookie_b, "each browser its own session");
    assert_ne!(token_a, token_b);
    // A's token with B's cookie, with no cookie, or with a made-up one.
    for cookie in [
        Some(cookie_b.as_str()),
        None,
        Some("scheduler_web_csrf=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
        Some("scheduler_web_csrf=not-a-session"),
    ] {
        let (status, body) = pause(&app, &token_a, cookie).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{cookie:?}: {body}");
    }
    assert!(store.records().is_empty());
    // Each browser with its own.
    let (status, body) = pause(&app, &token_a, Some(&cookie_a)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let (status, body) = pause(&app, &token_b, Some(&cookie_b)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
}

#[tokio::test]
async fn the_cookie_is_secure_when_the_app_says_it_is_served_over_https() {
    let store = FakeStore::new();
    let plain = replica(&store, None);
    let (_, res, _) = get(&plain, "/scheduler/jobs").await;
    let cookie = res.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(!cookie.contains("Secure"), "{cookie}");

    let dashboard = Dashboard::new(store.clone())
        .actions(Actions::enabled())
        .secure_cookies(true);
    let https = Router::new().nest("/scheduler", dashboard.router());
    let (_, res, _) = get(&https, "/scheduler/jobs").await;
    let cookie = res.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
}
