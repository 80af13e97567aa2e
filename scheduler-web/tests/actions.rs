#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The actions: off unless the app enables them, refused without the CSRF token,
//! recorded with the request's actor, redirected after the `POST`, and the store's
//! refusals shown to the operator with their status.

mod support;

use axum::Extension;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use scheduler_core::{ControlAction, Controls as _, Scope};
use scheduler_web::{Actions, Actor};
use support::{FakeStore, app, csrf, get, post, send};

#[tokio::test]
async fn actions_are_off_by_default() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::default());
    for path in ["pause", "resume", "trigger", "schedule", "remove-schedule"] {
        let (status, _, body) = post(
            &app,
            &format!("/scheduler/{path}"),
            &[("name", "sweep"), ("csrf", "anything")],
            Some("scheduler_web_csrf=anything"),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert!(body.contains("read-only"), "{path}: {body}");
    }
    // Even a body that is no form is refused as read-only, not parsed.
    let json = Request::post("/scheduler/pause")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"name": "sweep"}"#))
        .unwrap();
    let (status, _, body) = send(&app, json).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // And the schedule form is not served.
    let (status, _, _) = get(&app, "/scheduler/schedule").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(store.records().is_empty());
    assert!(store.paused().is_empty());
}

/// Form fields, the cookie header, and what the refusal says.
type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>, &'a str);

#[tokio::test]
async fn a_post_without_a_matching_csrf_token_is_refused() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = csrf(&app).await;
    let cookie_header = cookie.as_str();
    let wrong = "0".repeat(token.len());
    let wrong_cookie = format!("scheduler_web_csrf={wrong}");
    let cases: [Case<'_>; 4] = [
        (&[("name", "sweep")], Some(cookie_header), "no CSRF token"),
        (
            &[("name", "sweep"), ("csrf", &wrong)],
            Some(cookie_header),
            "does not match",
        ),
        (
            &[("name", "sweep"), ("csrf", &token)],
            None,
            "no CSRF cookie",
        ),
        // A cookie planted by someone else does not help without the secret.
        (
            &[("name", "sweep"), ("csrf", &wrong)],
            Some(&wrong_cookie),
            "does not match",
        ),
    ];
    for (fields, cookie, says) in cases {
        for path in ["pause", "resume", "trigger", "remove-schedule", "schedule"] {
            let (status, _, body) = post(&app, &format!("/scheduler/{path}"), fields, cookie).await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{path} {fields:?} {cookie:?}"
            );
            assert!(body.contains(says), "{path}: {body}");
            assert!(body.contains("Nothing was changed"));
        }
    }
    assert!(store.records().is_empty());

    let (status, _, _) = post(
        &app,
        "/scheduler/pause",
        &[("name", "sweep"), ("csrf", &token)],
        Some(cookie_header),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(store.records().len(), 1);
}

#[tokio::test]
async fn the_cookie_is_strict_and_hidden_from_scripts() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let (_, res, _) = get(&app, "/scheduler/jobs").await;
    let cookie = res.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(
        !cookie.contains("Path="),
        "scoped to the nest prefix by default: {cookie}"
    );
}

#[tokio::test]
async fn pause_and_resume_are_recorded_with_the_actor() {
    let store = FakeStore::new();
    let plain = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = csrf(&plain).await;
    // The app's auth layer names the operator.
    let authed = plain
        .clone()
        .layer(Extension(Actor("web:alice".to_owned())));

    let (status, res, _) = post(
        &authed,
        "/scheduler/pause",
        &[("name", "sweep"), ("csrf", &token), ("why", "deploy")],
        Some(&cookie),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[header::LOCATION], "./jobs");
    let paused = store.paused();
    assert_eq!(paused.len(), 1);
    assert_eq!(
        (paused[0].by.as_str(), paused[0].why.as_str()),
        ("web:alice", "deploy")
    );
    assert_eq!(paused[0].node, None);

    let (_, _, jobs) = get(&plain, "/scheduler/jobs").await;
    assert!(jobs.contains("paused everywhere"), "{jobs}");
    assert!(jobs.contains("data-action=\"resume\""));
    assert!(!jobs.contains("data-action=\"pause\""));

    let (status, res, _) = post(
        &plain,
        "/scheduler/resume",
        &[
            ("name", "sweep"),
            ("csrf", &token),
            ("catch_up", "no"),
            ("back", "job"),
        ],
        Some(&cookie),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[header::LOCATION], "./job?name=sweep");
    assert!(store.paused().is_empty());
    let records = store.records();
    assert_eq!(records[1].action, ControlAction::ResumeWithoutCatchUp);
    assert_eq!(records[1].by, "web", "no Actor: the default");

    let (_, _, history) = get(&plain, "/scheduler/job?name=sweep").await;
    assert!(
        history.contains("web:alice") && history.contains("resume_no_catch_up"),
        "{history}"
    );
}

#[tokio::test]
async fn a_node_scoped_pause_names_its_node() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = csrf(&app).await;
    let (status, _, _) = post(
        &app,
        "/scheduler/pause",
        &[("name", "sweep"), ("csrf", &token), ("node", "node-b")],
        Some(&cookie),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(store.paused()[0].node.as_deref(), Some("node-b"));
    let (_, _, jobs) = get(&app, "/scheduler/jobs").await;
    assert!(jobs.contains("paused on node-b"), "{jobs}");
    // Its resume button ends that pause, not a cluster-wide one.
    assert!(jobs.contains("name=\"node\" value=\"node-b\""));
}

#[tokio::test]
async fn a_trigger_redirects_to_the_run_it_asked_for() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = csrf(&app).await;
    let (status, res, _) = post(
        &app,
        "/scheduler/trigger",
        &[("name", "sweep"), ("csrf", &token)],
        Some(&cookie),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[header::LOCATION], "./trigger?id=1");
    let (status, _, page) = get(&app, "/scheduler/trigger?id=1").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("Triggered run #1") && page.contains("pending"),
        "{page}"
    );
    assert!(
        page.contains("http-equiv=\"refresh\""),
        "reloads until done"
    );
    let (_, _, jobs) = get(&app, "/scheduler/jobs").await;
    assert!(jobs.contains("Triggered runs not yet done") && jobs.contains("./trigger?id=1"));
}

#[tokio::test]
async fn controls_of_an_unknown_job_are_404() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = csrf(&app).await;
    for path in ["pause", "resume", "trigger", "remove-schedule"] {
        let (status, _, body) = post(
            &app,
            &format!("/scheduler/{path}"),
            &[("name", "nope"), ("csrf", &token)],
            Some(&cookie),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    let (status, _, _) = post(&app, "/scheduler/pause", &[("csrf", &token)], Some(&cookie)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(store.records().is_empty());
}

#[tokio::test]
async fn dynamic_schedules_are_added_changed_and_removed() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let (cookie, token) = csrf(&app).await;
    let put = |fields: Vec<(&'static str, &'static str)>| {
        let app = app.clone();
        let (cookie, token) = (cookie.clone(), token.clone());
        async move {
            let mut all = vec![("csrf", token.as_str())];
            all.extend(fields);
            post(&app, "/scheduler/schedule", &all, Some(&cookie)).await
        }
    };
    let report = vec![
        ("name", "tenant-report"),
        ("handler", "send_report"),
        ("schedule", "0 0 9 * * Mon-Fri"),
        ("zone", "Europe/Berlin"),
        ("scope", "cluster"),
        ("policy", "retry = 2"),
        ("args", r#"{"tenant": 7}"#),
        ("enabled", "on"),
        ("why", "new tenant"),
    ];

    // No instance registered the handler: 422, the form again with the message.
    let (status, _, body) = put(report.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body.contains("no instance registered a handler named"),
        "{body}"
    );
    assert!(
        body.contains("value=\"tenant-report\""),
        "the form keeps what was typed"
    );

    store.register("send_report");
    let mut bad_cron = report.clone();
    bad_cron[2] = ("schedule", "at nine");
    let (status, _, body) = put(bad_cron).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("invalid schedule"), "{body}");

    let mut bad_scope = report.clone();
    bad_scope[4] = ("scope", "galaxy");
    let (status, _, _) = put(bad_scope).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let mut code_name = report.clone();
    code_name[0] = ("name", "sweep");
    let (status, _, body) = put(code_name).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("registered in code"), "{body}");

    let (status, res, _) = put(report.clone()).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(res.headers()[header::LOCATION], "./jobs");
    let rows = store.schedules().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].zone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(rows[0].scope, Scope::Cluster);
    assert_eq!(rows[0].args, r#"{"tenant": 7}"#);
    assert!(rows[0].enabled);

    let (_, _, jobs) = get(&app, "/scheduler/jobs").await;
    assert!(
        jobs.contains("tenant-report") && jobs.contains("at 09:00:00, on Mon–Fri"),
        "{jobs}"
    );
    let (status, _, form) = get(&app, "/scheduler/schedule?name=tenant-report").await;
    assert_eq!(status, StatusCode::OK);
    assert!(form.contains("value=\"0 0 9 * * Mon-Fri\""), "{form}");

    // Unchecked, the checkbox is absent: disabled.
    let mut disabled = report.clone();
    disabled.retain(|(k, _)| *k != "enabled");
    let (status, _, _) = put(disabled).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(!store.schedules().await.unwrap()[0].enabled);

    let remove = [("name", "tenant-report"), ("csrf", token.as_str())];
    let (status, _, _) = post(&app, "/scheduler/remove-schedule", &remove, Some(&cookie)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(store.schedules().await.unwrap().is_empty());
    let (status, _, _) = post(&app, "/scheduler/remove-schedule", &remove, Some(&cookie)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_trigger_of_a_paused_job_is_an_explicit_choice() {
    let store = FakeStore::new();
    let app = app(&store, &["sweep"], Actions::enabled());
    let pause = scheduler_core::ControlRequest::new("sweep", "cli:bob").why("deploy");
    store.pause(&pause).await.unwrap();
    let (cookie, token) = csrf(&app).await;
    // Without saying so, a trigger of a paused job runs nothing and says why.
    let fields = [("name", "sweep"), ("csrf", token.as_str())];
    let (status, _, body) = post(&app, "/scheduler/trigger", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body.contains("sweep is paused") && body.contains("although it is paused"),
        "{body}"
    );
    let (_, _, jobs) = get(&app, "/scheduler/jobs").await;
    assert!(!jobs.contains("./trigger?id="), "no trigger: {jobs}");
    // The pages offer it as what it is.
    assert!(jobs.contains("Run now, although paused"), "{jobs}");
    let (_, _, page) = get(&app, "/scheduler/job?name=sweep").await;
    assert!(
        page.contains("name=\"while_paused\" value=\"yes\" required"),
        "{page}"
    );
    // Said so: it runs.
    let fields = [
        ("name", "sweep"),
        ("csrf", token.as_str()),
        ("while_paused", "yes"),
    ];
    let (status, res, body) = post(&app, "/scheduler/trigger", &fields, Some(&cookie)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(res.headers()[header::LOCATION], "./trigger?id=1");
}
