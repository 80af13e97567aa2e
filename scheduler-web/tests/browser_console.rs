#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The operators' console in a real browser (headless Chromium over WebDriver, as
//! `browser.rs`): a scheduler runs `tick` every second and `flaky` (failing one run
//! in three) every second on a SQLite file, with 120 dynamic schedules; the
//! dashboard is served on 127.0.0.1 in a 1920 × 1080 window. The operator:
//! 1. sees the header's counts and at least 20 jobs on the screen;
//! 2. pages the schedules forward, back and to the last page;
//! 3. filters by state (the header's `paused`) and searches by name;
//! 4. opens a job's page with `refresh=5`, and it reloads by itself: a newer run
//!    appears without any navigation;
//! 5. and screenshots of the jobs page and of a job's page are saved in the test's
//!    directory (and, when `SCHEDULER_WEB_SCREENSHOTS=DIR` is set, in `DIR`,
//!    relative to the workspace root: `SCHEDULER_WEB_SCREENSHOTS=docs/screenshots`
//!    refreshes the guide's pictures).

mod support;

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use fantoccini::{Client, Locator};
use scheduler_core::{BoxError, ControlRequest, JobContext, ScheduleRow, Scheduler, Store, job};
use scheduler_sqlite::{HistoryOptions, RunHistory, SqliteOptions, SqliteStore};
use scheduler_web::{Actions, Dashboard};
use support::browser::{ChromeDriver, PATIENCE, TempDir, eventually};

const SCHEDULES: usize = 120;

#[job(every = "1s")]
async fn tick(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

static FLAKY: AtomicU32 = AtomicU32::new(0);

#[job(every = "1s")]
async fn flaky(_ctx: JobContext) -> Result<(), BoxError> {
    tokio::time::sleep(std::time::Duration::from_millis(
        u64::from(FLAKY.load(Ordering::Relaxed) % 5) * 40,
    ))
    .await;
    if FLAKY.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
        return Err("the upstream answered 503".into());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pages_filters_searches_and_watches_a_job() {
    let dir = TempDir::new("console");
    let driver = ChromeDriver::start();
    let store = SqliteStore::open(dir.path().join("scheduler.db"), SqliteOptions::default())
        .await
        .unwrap();
    let history = Arc::new(
        RunHistory::new(&store, HistoryOptions::default())
            .await
            .unwrap(),
    );
    let scheduler = Scheduler::builder(store.clone())
        .node_id("console-test")
        .record_runs(history)
        .job(tick)
        .job(flaky)
        .handler("report", |_ctx: JobContext, _args: Arc<str>| async move {
            Ok::<(), BoxError>(())
        })
        .build()
        .unwrap();
    let dashboard = Dashboard::new(store.clone())
        .jobs(scheduler.jobs())
        .node(scheduler.node_id())
        .actions(Actions::enabled());
    let router: Router = Router::new().merge(dashboard.mount("/scheduler"));
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let base = format!("http://{}/scheduler", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let scheduler_task = tokio::spawn(scheduler.run_until(async {
        let _ = stopped.await;
    }));
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    // 120 schedules that never run in the test (03:00 on 1 January, in Berlin), put
    // once the scheduler has registered their handler; one of them paused.
    let controls = store.controls().unwrap();
    eventually("the handler registered", || async {
        controls
            .handlers()
            .await
            .ok()?
            .contains(&"report".to_owned())
            .then_some(())
    })
    .await;
    for i in 0..SCHEDULES {
        let mut row = ScheduleRow::new(format!("tenant-{i:03}"), "report", "0 0 3 1 1 *");
        row.zone = Some("Europe/Berlin".into());
        controls.put_schedule(&row, "test", "").await.unwrap();
    }
    controls
        .pause(&ControlRequest::new("tenant-007", "ops").why("tenant asked"))
        .await
        .unwrap();

    let session = driver.session_sized(1920, 1080).await;
    let browser = &session;

    // 1. The header, and at least 20 jobs on the screen.
    browser.goto(&format!("{base}/")).await.unwrap();
    let header = text(browser, "header").await;
    assert!(
        header.contains("122 jobs"),
        "two in code, 120 schedules: {header}"
    );
    assert!(header.contains("1 paused"), "{header}");
    assert_eq!(position(browser).await, "1–50 of 120 schedules");
    // The window's inner height: the screen less the browser's own bars.
    let inner = browser
        .execute("return window.innerHeight", Vec::new())
        .await
        .unwrap()
        .as_f64()
        .unwrap();
    let mut visible = 0;
    for row in browser
        .find_all(Locator::Css("tr[data-job]"))
        .await
        .unwrap()
    {
        let (_, y, _, h) = row.rectangle().await.unwrap();
        if y + h <= inner {
            visible += 1;
        }
    }
    assert!(
        visible >= 20,
        "{visible} jobs in a 1920 × 1080 window ({inner} px inside)"
    );
    screenshot(browser, dir.path(), "jobs.png").await;

    // 2. Forward, back, last.
    follow(browser, "next").await;
    assert_eq!(position(browser).await, "51–100 of 120 schedules");
    assert_eq!(first_row(browser).await, "tenant-050");
    follow(browser, "previous").await;
    assert_eq!(position(browser).await, "1–50 of 120 schedules");
    follow(browser, "last").await;
    assert_eq!(position(browser).await, "71–120 of 120 schedules");
    follow(browser, "previous").await;
    assert_eq!(position(browser).await, "21–70 of 120 schedules");

    // 3. The header's `paused` filters; the form searches.
    browser
        .find(Locator::Css("header a[data-count=\"paused\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let rows = eventually("the paused jobs only", || async {
        let rows = listed_jobs(browser).await;
        (rows.len() == 1).then_some(rows)
    })
    .await;
    assert_eq!(rows, ["tenant-007"]);
    browser.goto(&format!("{base}/jobs")).await.unwrap();
    let q = browser
        .find(Locator::Css(
            "form[data-form=\"filters\"] input[name=\"q\"]",
        ))
        .await
        .unwrap();
    q.send_keys("TENANT-11").await.unwrap();
    browser
        .find(Locator::Css("form[data-form=\"filters\"] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let rows = eventually("the search's results", || async {
        let rows = listed_jobs(browser).await;
        (rows.len() == 10).then_some(rows)
    })
    .await;
    assert_eq!(rows.first().map(String::as_str), Some("tenant-110"));
    assert_eq!(position(browser).await, "1–10 of 10 schedules");

    // 4. With refresh=5 the page reloads by itself: a mark left in this page's
    //    window is gone, and a newer run is listed, without navigation.
    browser
        .goto(&format!("{base}/job?name=tick&refresh=5"))
        .await
        .unwrap();
    let newest = || async {
        browser
            .find(Locator::Css("tr[data-run]"))
            .await
            .ok()?
            .attr("data-run")
            .await
            .ok()??
            .parse::<i64>()
            .ok()
    };
    let before = eventually("a run of tick", newest).await;
    browser
        .execute("window.stillHere = true", Vec::new())
        .await
        .unwrap();
    eventually("the page to reload itself with a newer run", || async {
        let kept = browser
            .execute("return window.stillHere === true", Vec::new())
            .await
            .ok()?;
        let newer = newest().await?;
        (kept == serde_json::Value::Bool(false) && newer > before).then_some(())
    })
    .await;
    assert!(
        browser
            .current_url()
            .await
            .unwrap()
            .query()
            .unwrap()
            .contains("refresh=5")
    );

    // 5. The job page of `flaky`, its chart with failures.
    browser
        .goto(&format!("{base}/job?name=flaky"))
        .await
        .unwrap();
    eventually("a failed run of flaky charted", || async {
        browser.refresh().await.ok()?;
        let bars = browser.find_all(Locator::Css("svg rect.bad")).await.ok()?;
        (bars.len() >= 2).then_some(())
    })
    .await;
    screenshot(browser, dir.path(), "job.png").await;

    session.close().await.unwrap();
    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, scheduler_task)
        .await
        .unwrap()
        .unwrap();
    server.abort();
}

async fn text(browser: &Client, css: &str) -> String {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// What the pager says.
async fn position(browser: &Client) -> String {
    text(browser, "[data-position]").await
}

/// The names of the jobs listed.
async fn listed_jobs(browser: &Client) -> Vec<String> {
    let mut names = Vec::new();
    for row in browser
        .find_all(Locator::Css("tr[data-job]"))
        .await
        .unwrap_or_default()
    {
        if let Ok(Some(name)) = row.attr("data-job").await {
            names.push(name);
        }
    }
    names
}

/// The first dynamic schedule listed.
async fn first_row(browser: &Client) -> String {
    listed_jobs(browser)
        .await
        .into_iter()
        .find(|n| n.starts_with("tenant-"))
        .unwrap_or_default()
}

/// Follows the pager's link `page`, and waits for the page it leads to.
async fn follow(browser: &Client, page: &str) {
    let before = position(browser).await;
    browser
        .find(Locator::Css(&format!("a[data-page=\"{page}\"]")))
        .await
        .unwrap_or_else(|e| panic!("no {page} link: {e}"))
        .click()
        .await
        .unwrap();
    eventually(&format!("the {page} page"), || async {
        let now = browser
            .find(Locator::Css("[data-position]"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        (now != before).then_some(())
    })
    .await;
}

/// Saves a screenshot as `name` in `dir`, and in `$SCHEDULER_WEB_SCREENSHOTS` when set.
async fn screenshot(browser: &Client, dir: &Path, name: &str) {
    let png = browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(dir.join(name), &png).unwrap();
    if let Some(to) = std::env::var_os("SCHEDULER_WEB_SCREENSHOTS").filter(|p| !p.is_empty()) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let to = root.join(to);
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(to.join(name), &png).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        println!("screenshot at {}", to.join(name).display());
    }
}
