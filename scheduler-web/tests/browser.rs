#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The dashboard in a real browser: Debian's `chromium`, headless, driven over
//! WebDriver by `chromedriver` (package `chromium-driver`; `.ci/run` installs both).
//!
//! A scheduler runs two jobs every second (`tick`, `tock`) and one every hour
//! (`hourly`) on a SQLite file in a temporary directory, with its run history; the
//! dashboard is served on 127.0.0.1 with actions enabled. The operator, in the
//! browser:
//! 1. loads the page and sees the jobs, then a run of `tick` appear;
//! 2. pauses `tick` — and the database shows no run of `tick` for any tick after the
//!    pause took effect, while `tock` runs three more ticks;
//! 3. resumes it, and it runs again;
//! 4. triggers `hourly`, follows the triggered run's page until it is done, and
//!    finds the run in the job's history (and in the database);
//! 5. submits a form whose CSRF token was taken out, and is refused (403) with
//!    nothing recorded;
//! 6. adds a dynamic schedule with the form, bound to a handler the app registered,
//!    and it runs;
//! 7. pauses `hourly` from its own page, with a reason;
//! 8. and a screenshot of the jobs page is saved in the test's temporary directory
//!    (and, when `SCHEDULER_WEB_SCREENSHOT=PATH` is set, at `PATH`, relative to the
//!    workspace root: `SCHEDULER_WEB_SCREENSHOT=docs/dashboard.png` refreshes the
//!    README's picture).
//!
//! A second test serves two replicas sharing one CSRF key behind a balancer (every
//! `GET` to one, every `POST` to the other): a form of one is accepted by the
//! other, and a token moved into another browser's page is refused there.
//!
//! Without `chromium` and `chromedriver` the test fails, saying how to install
//! them: it never passes without having run.

mod support;

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use chrono::{DateTime, TimeDelta, Utc};
use fantoccini::{Client, Locator};
use scheduler_core::{
    BoxError, ControlAction, Controls, JobContext, Outcome, Page, RunRow, Scheduler, Store,
    TriggerId, job,
};
use scheduler_sqlite::{HistoryOptions, RunHistory, SqliteOptions, SqliteStore};
use scheduler_web::{Actions, Dashboard};
use support::browser::{ChromeDriver, PATIENCE, TempDir, eventually};
use tokio::sync::oneshot;

#[job(every = "1s")]
async fn tick(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

#[job(every = "1s")]
async fn tock(_ctx: JobContext) -> Result<(), BoxError> {
    Ok(())
}

/// Runs once an hour on its own (not at start-up: its catch-up window is a second),
/// so its runs within the test are the trigger's.
#[job(every = "1h", catch_up = "1s")]
async fn hourly(_ctx: JobContext) -> Result<(), BoxError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pauses_resumes_and_triggers_jobs_in_a_browser() {
    let dir = TempDir::new("browser");
    let driver = ChromeDriver::start();
    let running = App::start(dir.path()).await;
    let session = driver.session().await;
    let (app, browser) = (&running, &session);
    let jobs_url = format!("{}/scheduler", app.base);

    // 1. The jobs, and a run of `tick`.
    browser.goto(&jobs_url).await.unwrap();
    let url = browser.current_url().await.unwrap();
    assert!(
        url.path().ends_with("/scheduler/jobs"),
        "redirected to the jobs page: {url}"
    );
    for name in ["tick", "tock", "hourly"] {
        browser
            .find(Locator::Css(&format!("tr[data-job=\"{name}\"]")))
            .await
            .unwrap_or_else(|e| panic!("job {name} listed: {e}"));
    }
    eventually("a run of tick shown on the jobs page", move || async move {
        browser.refresh().await.ok()?;
        let row = row_text(browser, "tick").await?;
        row.contains("succeeded").then_some(())
    })
    .await;

    // 2. Pause `tick` from the page; it stops running (checked in the database).
    click(browser, "tick", "pause").await;
    // The click returns before the browser has followed the redirect.
    eventually("the page to show the pause", move || async move {
        let row = row_text(browser, "tick").await?;
        row.contains("paused everywhere").then_some(())
    })
    .await;
    let paused_at = app.last_control("tick", ControlAction::Pause).await;
    let tock_before = app.last_tick("tock").await;
    eventually(
        "tock to run three ticks after the pause",
        move || async move {
            let last = app.last_tick("tock").await?;
            (last >= paused_at + TimeDelta::seconds(3) && Some(last) > tock_before).then_some(())
        },
    )
    .await;
    // A tick already taken (or running) when the pause was recorded may still run;
    // none after it.
    let late: Vec<RunRow> = app
        .runs("tick")
        .await
        .into_iter()
        .filter(|r| r.tick > paused_at + TimeDelta::seconds(1))
        .collect();
    assert!(late.is_empty(), "tick ran while paused: {late:?}");

    // 3. Resume it; it runs again.
    click(browser, "tick", "resume").await;
    let resumed_at = app.last_control("tick", ControlAction::Resume).await;
    eventually("tick to run after the resume", move || async move {
        (app.last_tick("tick").await? > resumed_at).then_some(())
    })
    .await;
    eventually("the page to show tick resumed", move || async move {
        let row = row_text(browser, "tick").await?;
        (!row.contains("paused everywhere")).then_some(())
    })
    .await;

    // 4. Trigger `hourly`, follow the run, find it in the history.
    click(browser, "hourly", "trigger").await;
    // The click returns before the browser has followed the redirect.
    let url = eventually("the trigger's page", move || async move {
        let url = browser.current_url().await.ok()?;
        url.path().ends_with("/scheduler/trigger").then_some(url)
    })
    .await;
    let id = url
        .query_pairs()
        .find(|(k, _)| k == "id")
        .and_then(|(_, v)| v.parse().ok())
        .expect("the trigger's id in the URL");
    let asked = app
        .controls()
        .trigger_status(TriggerId(id))
        .await
        .unwrap()
        .expect("the trigger in the database")
        .requested_at;
    // The page reloads itself until the run is done.
    eventually("the triggered run to be done", move || async move {
        let dl = browser.find(Locator::Css("dl[data-trigger]")).await.ok()?;
        (dl.attr("data-done").await.ok()?? == "true").then_some(())
    })
    .await;
    let state = browser
        .find(Locator::Css("dl[data-trigger]"))
        .await
        .unwrap();
    let state = state.text().await.unwrap();
    assert!(
        state.contains("succeeded"),
        "the trigger's outcome: {state}"
    );
    browser
        .find(Locator::LinkText("hourly"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let runs = browser
        .find_all(Locator::Css("tr[data-run]"))
        .await
        .unwrap();
    assert!(!runs.is_empty(), "the triggered run in hourly's history");
    assert!(runs[0].text().await.unwrap().contains("succeeded"));
    // The triggered run's tick is the instant it was asked for (or a later one).
    let ran = app.runs("hourly").await;
    assert!(
        ran.iter()
            .any(|r| r.tick >= asked && r.outcome == Outcome::Succeeded),
        "the triggered run in the database: {ran:?}"
    );

    // 5. A form without its CSRF token is refused, and changes nothing.
    browser
        .goto(&format!("{}/scheduler/jobs", app.base))
        .await
        .unwrap();
    let controls_before = app.controls_recorded().await;
    browser
        .execute(
            "document.querySelector('form[data-job=\"tock\"][data-action=\"pause\"] input[name=\"csrf\"]').remove()",
            Vec::new(),
        )
        .await
        .unwrap();
    click(browser, "tock", "pause").await;
    // The click returns before the browser has the answer.
    let body = eventually("the refusal page", move || async move {
        let body = browser
            .find(Locator::Css("body"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        body.contains("Forbidden").then_some(body)
    })
    .await;
    assert!(
        body.contains("the form carried no CSRF token"),
        "refused, in words: {body}"
    );
    assert_eq!(
        app.controls_recorded().await,
        controls_before,
        "nothing recorded"
    );

    // 6. A dynamic schedule added with the form runs, bound to its handler.
    browser
        .goto(&format!("{}/scheduler/jobs", app.base))
        .await
        .unwrap();
    browser
        .find(Locator::Css("a[data-action=\"new-schedule\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    for (field, value) in [
        ("name", "tenant-7-report"),
        ("handler", "report"),
        ("schedule", "every 2s"),
        ("args", r#"{"tenant": 7}"#),
        ("why", "tenant 7 signed up"),
    ] {
        let input = browser
            .find(Locator::Css(&format!("[name=\"{field}\"]")))
            .await
            .unwrap();
        input.clear().await.unwrap();
        input.send_keys(value).await.unwrap();
    }
    browser
        .find(Locator::Css("form[data-action=\"put-schedule\"] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The click returns before the browser has followed the redirect.
    eventually("the schedule listed", move || async move {
        let row = row_text(browser, "tenant-7-report").await?;
        row.contains("every 2 s").then_some(())
    })
    .await;
    eventually("a run of the dynamic schedule", move || async move {
        app.last_tick("tenant-7-report").await
    })
    .await;

    // 7. Pause `hourly` from its own page, with a reason.
    browser
        .find(Locator::LinkText("hourly"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let why = browser
        .find(Locator::Css(
            "form[data-action=\"pause\"] input[name=\"why\"]",
        ))
        .await
        .unwrap();
    why.send_keys("maintenance window").await.unwrap();
    click(browser, "hourly", "pause").await;
    let pause = eventually("the job page to show the pause", move || async move {
        let dl = browser
            .find(Locator::Css("main dl"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        dl.contains("paused everywhere").then_some(dl)
    })
    .await;
    assert!(pause.contains("maintenance window"), "{pause}");

    // 8. A screenshot of the jobs page.
    browser
        .goto(&format!("{}/scheduler/jobs", app.base))
        .await
        .unwrap();
    let png = browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let shot = dir.path().join("dashboard.png");
    std::fs::write(&shot, &png).unwrap();
    println!("screenshot: {}", shot.display());
    if let Some(path) = std::env::var_os("SCHEDULER_WEB_SCREENSHOT").filter(|p| !p.is_empty()) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let path = root.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, &png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!("screenshot also at {}", path.display());
    }

    session.close().await.unwrap();
    running.stop().await;
}

/// Two replicas given one key, behind a balancer that sends every `GET` to one and
/// every `POST` to the other: the forms one serves, the other accepts. And a token
/// moved into another browser's page is refused there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_key_and_a_token_stays_in_its_browser() {
    let dir = TempDir::new("replicas");
    let driver = ChromeDriver::start();
    let store = SqliteStore::open(dir.path().join("scheduler.db"), SqliteOptions::default())
        .await
        .unwrap();
    let jobs = Scheduler::builder(store.clone())
        .node_id("replicas")
        .job(hourly)
        .build()
        .unwrap()
        .jobs();
    let replica = || -> Router {
        let dashboard = Dashboard::new(store.clone())
            .jobs(jobs.clone())
            .actions(Actions::enabled())
            .csrf_key(b"one key for every replica, 32 b.");
        Router::new().nest("/scheduler", dashboard.router())
    };
    let (reads, writes) = (replica(), replica());
    let balancer = Router::new().fallback(move |req: axum::extract::Request| {
        let to = if req.method() == axum::http::Method::POST {
            writes.clone()
        } else {
            reads.clone()
        };
        async move {
            match tower::ServiceExt::oneshot(to, req).await {
                Ok(res) => res,
                Err(never) => match never {},
            }
        }
    });
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let jobs_url = format!("http://{}/scheduler/jobs", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, balancer).await });
    let paused = || async {
        store
            .controls()
            .unwrap()
            .paused()
            .await
            .unwrap()
            .iter()
            .any(|p| p.job == "hourly")
    };

    // Served by one replica, posted to the other.
    let first = driver.session().await;
    first.goto(&jobs_url).await.unwrap();
    let token_of = |browser: &Client, action: &'static str| {
        let css =
            format!("form[data-job=\"hourly\"][data-action=\"{action}\"] input[name=\"csrf\"]");
        let browser = browser.clone();
        async move {
            browser
                .find(Locator::Css(&css))
                .await
                .unwrap()
                .attr("value")
                .await
                .unwrap()
                .unwrap()
        }
    };
    let first_token = token_of(&first, "pause").await;
    click(&first, "hourly", "pause").await;
    eventually("hourly paused through the other replica", || async {
        paused().await.then_some(())
    })
    .await;

    // Another browser, with the first one's token in its form.
    let second = driver.session().await;
    second.goto(&jobs_url).await.unwrap();
    assert_ne!(token_of(&second, "resume").await, first_token);
    second
        .execute(
            "document.querySelector('form[data-job=\"hourly\"][data-action=\"resume\"] input[name=\"csrf\"]').value = arguments[0]",
            vec![serde_json::Value::String(first_token.clone())],
        )
        .await
        .unwrap();
    click(&second, "hourly", "resume").await;
    let body = eventually("the refusal page", || async {
        let body = second
            .find(Locator::Css("body"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        body.contains("Forbidden").then_some(body)
    })
    .await;
    assert!(
        body.contains("does not match this browser's session"),
        "{body}"
    );
    assert!(paused().await, "still paused");

    // The first browser's own page resumes it.
    first.goto(&jobs_url).await.unwrap();
    click(&first, "hourly", "resume").await;
    eventually("hourly resumed", || async {
        (!paused().await).then_some(())
    })
    .await;

    first.close().await.unwrap();
    second.close().await.unwrap();
    server.abort();
}

/// Clicks the button of the form `action` of job `job`'s row, and waits for the
/// page it leads to.
async fn click(browser: &Client, job: &str, action: &str) {
    let css = format!("form[data-job=\"{job}\"][data-action=\"{action}\"] button");
    browser
        .find(Locator::Css(&css))
        .await
        .unwrap_or_else(|e| panic!("no {action} button for {job}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking {action} of {job}: {e}"));
    browser
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("main"))
        .await
        .unwrap();
}

/// The text of job `job`'s row on the page shown.
async fn row_text(browser: &Client, job: &str) -> Option<String> {
    let row = browser
        .find(Locator::Css(&format!("tr[data-job=\"{job}\"]")))
        .await
        .ok()?;
    row.text().await.ok()
}

/// The scheduler and the dashboard, on a SQLite file.
struct App {
    base: String,
    store: SqliteStore,
    stop: Option<oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl App {
    async fn start(dir: &Path) -> Self {
        let store = SqliteStore::open(dir.join("scheduler.db"), SqliteOptions::default())
            .await
            .unwrap();
        assert!(
            store.controls().is_some(),
            "the SQLite store keeps controls"
        );
        let history = Arc::new(
            RunHistory::new(&store, HistoryOptions::default())
                .await
                .unwrap(),
        );
        let scheduler = Scheduler::builder(store.clone())
            .node_id("browser-test")
            .lease_ttl(Duration::from_secs(5))
            .control_poll(Some(Duration::from_millis(500)))
            .record_runs(history)
            .job(tick)
            .job(tock)
            .job(hourly)
            .handler("report", |_ctx: JobContext, _args: Arc<str>| async move {
                Ok::<(), BoxError>(())
            })
            .build()
            .unwrap();
        let dashboard = Dashboard::new(store.clone())
            .jobs(scheduler.jobs())
            .node(scheduler.node_id())
            .actions(Actions::enabled());
        let router: Router = Router::new().nest("/scheduler", dashboard.router());
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());

        let (stop, stopped) = oneshot::channel::<()>();
        let (serve_stop, serve_stopped) = tokio::sync::watch::channel(false);
        let scheduler_task = tokio::spawn(async move {
            scheduler
                .run_until(async {
                    let _ = stopped.await;
                })
                .await;
            let _ = serve_stop.send(true);
        });
        let server_task = tokio::spawn(async move {
            let mut stopped = serve_stopped;
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
                .unwrap();
        });
        Self {
            base,
            store,
            stop: Some(stop),
            tasks: vec![scheduler_task, server_task],
        }
    }

    fn controls(&self) -> &dyn Controls {
        self.store.controls().unwrap()
    }

    /// The runs of `job` in the database, newest first.
    async fn runs(&self, job: &str) -> Vec<RunRow> {
        let page = Page {
            before: None,
            limit: 1000,
        };
        self.controls().runs(Some(job), page).await.unwrap()
    }

    /// The tick of `job`'s newest run, if any.
    async fn last_tick(&self, job: &str) -> Option<DateTime<Utc>> {
        self.runs(job).await.iter().map(|r| r.tick).max()
    }

    /// When the newest control `action` of `job` was recorded (store clock).
    ///
    /// Waits for it: a click returns before the browser's POST has been answered.
    async fn last_control(&self, job: &str, action: ControlAction) -> DateTime<Utc> {
        eventually(&format!("a {action} of {job} to be recorded"), || async {
            let records = self
                .controls()
                .control_history(Some(job), Page::default())
                .await
                .ok()?;
            records.iter().find(|r| r.action == action).map(|r| r.at)
        })
        .await
    }

    async fn controls_recorded(&self) -> usize {
        let page = Page {
            before: None,
            limit: 1000,
        };
        self.controls()
            .control_history(None, page)
            .await
            .unwrap()
            .len()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        for task in self.tasks.drain(..) {
            tokio::time::timeout(PATIENCE, task)
                .await
                .expect("the scheduler and the server stop")
                .unwrap();
        }
    }
}
