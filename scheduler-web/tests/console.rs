#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The operators' console: the summary header, the refresh choice, the jobs page's
//! filters, search and paging, times in each job's zone, the job page's chart, and
//! the address with a trailing slash.

mod support;

use axum::Router;
use axum::http::{StatusCode, header};
use scheduler_core::Controls as _;
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
        .trigger(&scheduler_core::ControlRequest::new("sweep", "test"))
        .await
        .unwrap();
    let app = app(&store, &["sweep"], Actions::default());

    let (status, _, off) = get(&app, "/scheduler/jobs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!off.contains("http-equiv=\"refresh\""), "off by default");
    let links = hrefs(&off);
    for choice in ["./jobs?refresh=5", "./jobs?refresh=15", "./jobs?refresh=60"] {
        assert!(links.iter().any(|l| l == choice), "{choice} offered: {links:?}");
    }

    let (status, _, on) = get(&app, "/scheduler/jobs?refresh=5").await;
    assert_eq!(status, StatusCode::OK);
    assert!(on.contains(r#"<meta http-equiv="refresh" content="5">"#), "{on}");
    let links = hrefs(&on);
    for nav in ["./jobs", "./leases", "./failures", "./audit", "./instances"] {
        let kept = format!("{nav}?refresh=5");
        assert!(links.contains(&kept), "the nav keeps the refresh: {kept} in {links:?}");
    }
    // The choice "off" leads back to the page without it.
    assert!(links.iter().any(|l| l == "./jobs"), "{links:?}");
    // A page with filters keeps them in its refresh choices.
    let (_, _, filtered) = get(&app, "/scheduler/job?name=sweep&refresh=15").await;
    assert!(filtered.contains(r#"content="15""#));
    assert!(
        hrefs(&filtered).iter().any(|l| l == "./job?name=sweep&refresh=60"),
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
