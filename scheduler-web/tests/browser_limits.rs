#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The console's limits in a real browser (Debian's `chromium`, headless, driven over
//! WebDriver by `chromedriver`, as in `browser.rs`), each as an operator meets it:
//! 1. a reason typed past 1 KiB stops at 1 KiB in the field (`maxlength`); a form
//!    whose field was stretched past it is refused by a page in words, and nothing
//!    is recorded; a reason of exactly 1 KiB is kept whole;
//! 2. "Trigger now" of a paused job is not sent until the operator ticks "run it
//!    although it is paused"; then it is recorded as `trigger_while_paused`; the jobs
//!    page says "Run now, although paused" for it;
//! 3. the schedule form refuses `every 1ms` (the minimum is 1 s) and a time zone
//!    given with an `every` schedule, each in words with what was typed kept, and
//!    stores nothing; the corrected form is stored;
//! 4. a form body over 64 KiB (arguments pasted in) is refused by a page in words.
//!
//! The dashboard serves a store kept in memory (the handler tests' `FakeStore`,
//! which keeps the stores' rules) on 127.0.0.1 with actions enabled. Without
//! `chromium` and `chromedriver` the test fails, saying how to install them.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use fantoccini::{Client, Locator};
use scheduler_core::{ControlAction, Controls as _};
use scheduler_web::Actions;
use support::browser::{ChromeDriver, browsers_of, eventually};
use support::{FakeStore, app};

/// A session never closed (a test that panicked, or forgot) goes with its driver:
/// killing chromedriver alone left its Chromium running after the tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_left_open_goes_with_its_driver() {
    let driver = ChromeDriver::start();
    let marker = driver.marker();
    let _session = driver.session().await;
    assert!(browsers_of(&marker) > 0, "no browser runs with {marker}");
    drop(driver);
    let marker = &marker;
    eventually("the browser to go with its driver", move || async move {
        (browsers_of(marker) == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_holds_in_a_browser() {
    let store = FakeStore::new();
    store.register("report");
    let router = app(&store, &["sweep"], Actions::enabled());
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let base = format!("http://{}/scheduler", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let driver = ChromeDriver::start();
    let browser = &driver.session().await;

    // 1. A reason past 1 KiB.
    browser
        .goto(&format!("{base}/job?name=sweep"))
        .await
        .unwrap();
    let why = "form[data-action=\"pause\"] input[name=\"why\"]";
    browser
        .find(Locator::Css(why))
        .await
        .unwrap()
        .send_keys(&"r".repeat(1100))
        .await
        .unwrap();
    let typed = browser
        .find(Locator::Css(why))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(typed.len(), 1024, "the field stops at 1 KiB");
    // A form stretched past the field's limit (by hand, or an older page).
    browser
        .execute(
            "const f = document.querySelector(arguments[0]); \
             f.removeAttribute('maxlength'); f.value = 'r'.repeat(1100);",
            vec![why.into()],
        )
        .await
        .unwrap();
    submit(browser, "form[data-action=\"pause\"] button").await;
    let body = page_text(browser, "a refusal of the long reason", "1 KiB").await;
    assert!(body.contains("1100 bytes"), "{body}");
    assert!(store.records().is_empty(), "{:?}", store.records());
    assert!(store.paused().is_empty());
    // Exactly 1 KiB is kept whole.
    browser
        .goto(&format!("{base}/job?name=sweep"))
        .await
        .unwrap();
    browser
        .find(Locator::Css(why))
        .await
        .unwrap()
        .send_keys(&"k".repeat(1024))
        .await
        .unwrap();
    submit(browser, "form[data-action=\"pause\"] button").await;
    let pause = eventually("the pause recorded", || async {
        store.paused().into_iter().next()
    })
    .await;
    assert_eq!(pause.why, "k".repeat(1024));

    // 2. A trigger of the paused job, only when said so.
    browser
        .goto(&format!("{base}/job?name=sweep"))
        .await
        .unwrap();
    submit(browser, "form[data-action=\"trigger\"] button").await;
    // The browser does not send a form whose required box is not ticked.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let url = browser.current_url().await.unwrap();
    assert!(url.path().ends_with("/job"), "{url}");
    assert!(
        !store.records().iter().any(|r| matches!(
            r.action,
            ControlAction::Trigger | ControlAction::TriggerWhilePaused
        )),
        "{:?}",
        store.records()
    );
    browser
        .find(Locator::Css(
            "form[data-action=\"trigger\"] input[name=\"while_paused\"]",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    submit(browser, "form[data-action=\"trigger\"] button").await;
    eventually("the trigger recorded while paused", || async {
        store
            .records()
            .iter()
            .any(|r| r.action == ControlAction::TriggerWhilePaused)
            .then_some(())
    })
    .await;
    let triggers = store.open_triggers().await.unwrap();
    assert_eq!(triggers.len(), 1, "{triggers:?}");
    browser.goto(&format!("{base}/jobs")).await.unwrap();
    let button = browser
        .find(Locator::Css(
            "form[data-job=\"sweep\"][data-action=\"trigger\"] button",
        ))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(button, "Run now, although paused");

    // 3. The schedule form: the minimum period, and no zone with `every`.
    fill(browser, &base, "every 1ms", "").await;
    page_text(browser, "a refusal of every 1ms", "at least every 1s").await;
    let kept = browser
        .find(Locator::Css("[name=\"schedule\"]"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("every 1ms"), "what was typed is kept");
    fill(browser, &base, "every 30s", "Europe/Berlin").await;
    page_text(browser, "a refusal of a zone with every", "time zone").await;
    assert!(store.schedules().await.unwrap().is_empty());
    fill(browser, &base, "every 30s", "").await;
    eventually("the corrected schedule stored", || async {
        let rows = store.schedules().await.ok()?;
        rows.iter().any(|r| r.name == "tenant-1").then_some(())
    })
    .await;

    // 4. A body over 64 KiB.
    browser.goto(&format!("{base}/schedule")).await.unwrap();
    browser
        .execute(
            "const f = document.querySelector('form[data-action=\"put-schedule\"]'); \
             f.querySelector('[name=\"name\"]').value = 'tenant-2'; \
             f.querySelector('[name=\"handler\"]').value = 'report'; \
             f.querySelector('[name=\"schedule\"]').value = 'every 30s'; \
             f.querySelector('[name=\"args\"]').value = \
               JSON.stringify({ blob: 'b'.repeat(70000) });",
            vec![],
        )
        .await
        .unwrap();
    submit(browser, "form[data-action=\"put-schedule\"] button").await;
    page_text(browser, "a refusal of the large body", "64 KiB").await;
    let rows = store.schedules().await.unwrap();
    assert!(rows.iter().all(|r| r.name != "tenant-2"), "{rows:?}");

    server.abort();
}

/// Fills the schedule form with `schedule` and `zone` for `tenant-1`, and sends it.
async fn fill(browser: &Client, base: &str, schedule: &str, zone: &str) {
    browser.goto(&format!("{base}/schedule")).await.unwrap();
    for (field, value) in [
        ("name", "tenant-1"),
        ("handler", "report"),
        ("schedule", schedule),
        ("zone", zone),
    ] {
        let input = browser
            .find(Locator::Css(&format!(
                "form[data-action=\"put-schedule\"] [name=\"{field}\"]"
            )))
            .await
            .unwrap();
        input.clear().await.unwrap();
        input.send_keys(value).await.unwrap();
    }
    submit(browser, "form[data-action=\"put-schedule\"] button").await;
}

/// Clicks the button `css`.
async fn submit(browser: &Client, css: &str) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
}

/// The page's text, once it contains `words` (a click returns before the answer).
async fn page_text(browser: &Client, what: &str, words: &str) -> String {
    eventually(what, || async {
        let body = browser
            .find(Locator::Css("body"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        body.contains(words).then_some(body)
    })
    .await
}
