#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The console's list pages in a real browser (Debian's `chromium`, headless, driven
//! over WebDriver by `chromedriver`, as in `browser.rs`): the leases paged forwards
//! and back by their links and filtered with their form (the filter kept by the
//! pager), the failures, the audit and the instances, and the warning on a
//! triggered run's page when no live instance runs its job.
//!
//! The dashboard serves a store kept in memory (the handler tests' `FakeStore`) on
//! 127.0.0.1, three rows a page. When `SCHEDULER_WEB_SCREENSHOTS=DIR` is set (relative
//! to the workspace root: `SCHEDULER_WEB_SCREENSHOTS=docs/screenshots`), a PNG of
//! each page is saved there.
//!
//! Without `chromium` and `chromedriver` the test fails, saying how to install
//! them: it never passes without having run.

mod support;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use chrono::{TimeDelta, Utc};
use fantoccini::{Client, Locator};
use scheduler_core::{ControlRequest, Controls as _, InstanceRow, LeaseRow, Outcome};
use scheduler_web::Actions;
use support::browser::{ChromeDriver, PATIENCE, eventually};
use support::{FakeStore, app};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_pages_filters_and_reads_the_list_pages_in_a_browser() {
    let store = FakeStore::new();
    let now = Utc::now();
    {
        let mut s = store.state.lock().unwrap();
        s.leases = (1..=7)
            .map(|i| LeaseRow {
                name: format!("job-{i}"),
                holder: Some(format!("node-{}:42:00ff00ff00ff00ff", i % 2)),
                tick: now,
                token: i,
                expires_at: now + TimeDelta::seconds(if i % 3 == 0 { -30 } else { 30 }),
                released_at: None,
            })
            .collect();
        s.instances = vec![InstanceRow {
            node: "web-1".to_owned(),
            version: "1.2.3".to_owned(),
            started_at: now - TimeDelta::hours(2),
            seen_at: now - TimeDelta::minutes(5),
            expires_at: now - TimeDelta::minutes(4),
            stopped: false,
            handlers: vec!["report".to_owned()],
            jobs: vec!["sweep".to_owned()],
        }];
    }
    for i in 0..4 {
        store.add_run("sweep", Outcome::Succeeded, None);
        let error = format!("connection refused (attempt {i})\n  at sweep.rs:42\n  at main.rs:7");
        store.add_run("sweep", Outcome::Failed, Some(&error));
        store
            .pause(&ControlRequest::new("sweep", "web:alice").why(format!("window {i}")))
            .await
            .unwrap();
    }
    let trigger = store
        .trigger(&ControlRequest::new("sweep", "web:alice").while_paused(true))
        .await
        .unwrap();

    let router = app(&store, &["sweep"], Actions::default());
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let base = format!("http://{}/scheduler", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let driver = ChromeDriver::start();
    let browser = &driver.session().await;
    let shots = Screenshots::new();

    // Leases, forwards and back by the pager's links.
    browser.goto(&format!("{base}/leases")).await.unwrap();
    assert_eq!(names(browser, "lease").await, ["job-1", "job-2", "job-3"]);
    assert_eq!(
        text(browser, "[data-count=leases]").await,
        "1–3 of 7, by name"
    );
    shots.save(browser, "leases").await;
    follow(browser, "next").await;
    assert_eq!(names(browser, "lease").await, ["job-4", "job-5", "job-6"]);
    assert_eq!(
        text(browser, "[data-count=leases]").await,
        "4–6 of 7, by name"
    );
    follow(browser, "next").await;
    assert_eq!(names(browser, "lease").await, ["job-7"]);
    follow(browser, "previous").await;
    assert_eq!(names(browser, "lease").await, ["job-4", "job-5", "job-6"]);
    follow(browser, "previous").await;
    assert_eq!(names(browser, "lease").await, ["job-1", "job-2", "job-3"]);
    follow(browser, "last").await;
    assert_eq!(names(browser, "lease").await, ["job-5", "job-6", "job-7"]);

    // Filtered with the form: leases held now on node-1; the pager keeps it.
    browser.goto(&format!("{base}/leases")).await.unwrap();
    let node = browser
        .find(Locator::Css("input[name=node]"))
        .await
        .unwrap();
    node.send_keys("node-1").await.unwrap();
    browser
        .find(Locator::Css("select[name=held] option[value=yes]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .find(Locator::Css("form.filters button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually("the filtered list", || async {
        let url = browser.current_url().await.ok()?;
        url.query()?.contains("held=yes").then_some(())
    })
    .await;
    assert_eq!(names(browser, "lease").await, ["job-1", "job-5", "job-7"]);
    assert_eq!(
        text(browser, "[data-count=leases]").await,
        "1–3 of 3 matching, by name"
    );
    shots.save(browser, "leases-filtered").await;

    // Failures, audit, instances.
    browser.goto(&format!("{base}/failures")).await.unwrap();
    assert_eq!(names(browser, "run").await, ["8", "6", "4"]);
    let folded = browser
        .find(Locator::Css("tr[data-run='8'] details"))
        .await
        .unwrap();
    assert!(
        folded
            .text()
            .await
            .unwrap()
            .contains("connection refused (attempt 3)")
    );
    shots.save(browser, "failures").await;
    follow(browser, "older").await;
    assert_eq!(names(browser, "run").await, ["2"]);

    browser.goto(&format!("{base}/audit")).await.unwrap();
    assert_eq!(names(browser, "control").await, ["5", "4", "3"]);
    shots.save(browser, "audit").await;

    browser.goto(&format!("{base}/instances")).await.unwrap();
    let row = browser
        .find(Locator::Css("tr[data-instance=web-1]"))
        .await
        .unwrap();
    assert_eq!(
        row.attr("data-state").await.unwrap().as_deref(),
        Some("gone")
    );
    shots.save(browser, "instances").await;

    // The triggered run's page warns: its job's only instance is gone.
    browser
        .goto(&format!("{base}/trigger?id={}", trigger.id))
        .await
        .unwrap();
    let warning = browser
        .find(Locator::Css("[data-warning=no-live-instance]"))
        .await
        .unwrap();
    assert!(
        warning.is_displayed().await.unwrap(),
        "the warning is visible"
    );
    let said = warning.text().await.unwrap();
    assert!(said.contains("No live instance runs sweep"), "{said}");
    shots.save(browser, "trigger-no-live-instance").await;

    browser.clone().close().await.unwrap();
    server.abort();
}

/// The `data-{attr}` of every row of the page shown, in order.
async fn names(browser: &Client, attr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for row in browser
        .find_all(Locator::Css(&format!("tr[data-{attr}]")))
        .await
        .unwrap()
    {
        out.push(row.attr(&format!("data-{attr}")).await.unwrap().unwrap());
    }
    out
}

async fn text(browser: &Client, css: &str) -> String {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Clicks the pager's link `name` and waits for the page it leads to.
async fn follow(browser: &Client, name: &str) {
    let from = browser.current_url().await.unwrap();
    browser
        .find(Locator::Css(&format!("a[data-page={name}]")))
        .await
        .unwrap_or_else(|e| panic!("no {name} link: {e}"))
        .click()
        .await
        .unwrap();
    eventually(&format!("the {name} page"), || async {
        (browser.current_url().await.ok()? != from).then_some(())
    })
    .await;
    browser
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("main"))
        .await
        .unwrap();
}

/// Where the pages' PNGs go, when `SCHEDULER_WEB_SCREENSHOTS` says.
struct Screenshots(Option<PathBuf>);

impl Screenshots {
    fn new() -> Self {
        let dir = std::env::var_os("SCHEDULER_WEB_SCREENSHOTS").filter(|p| !p.is_empty());
        Self(dir.map(|dir| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
            let dir = root.join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        }))
    }

    async fn save(&self, browser: &Client, name: &str) {
        let png = browser.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        if let Some(dir) = &self.0 {
            let path = dir.join(format!("{name}.png"));
            std::fs::write(&path, &png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            println!("screenshot: {}", path.display());
        }
    }
}
