//! A real browser for the tests: Debian's `chromium`, headless, driven over
//! WebDriver by `chromedriver` (package `chromium-driver`); a temporary directory;
//! and a wait for a condition.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, unreachable_pub)]

use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};

/// How long any one wait may take before the test gives up. Generous: a loaded CI
/// machine is slow, and nothing here measures speed.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// Polls `check` until it gives a value, for at most [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "gave up after {PATIENCE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `chromedriver` on a free port of 127.0.0.1, killed on drop.
pub struct ChromeDriver {
    child: Child,
    url: String,
    chromium: PathBuf,
}

/// Where Debian's packages put the two programs, or the first on `PATH`.
fn program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .chain([Path::new("/usr/bin").join(name)])
            .find(|p| p.is_file())
    })
}

impl ChromeDriver {
    pub fn start() -> Self {
        const INSTALL: &str = "the browser test needs Debian's chromium and chromedriver: \
             apt-get update && apt-get install -y chromium chromium-driver \
             (.ci/run installs them when missing)";
        let chromium = program(&["chromium", "chromium-browser"])
            .unwrap_or_else(|| panic!("no chromium found; {INSTALL}"));
        let driver = program(&["chromedriver"])
            .unwrap_or_else(|| panic!("no chromedriver found; {INSTALL}"));
        let port = StdListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        // A process group of its own, with the browsers it starts: all of them go
        // on drop, even a browser whose session was never closed (a test that
        // panicked, or forgot), which killing chromedriver alone left running.
        let child = Command::new(&driver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL}", driver.display()));
        let mut driver = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            chromium,
        };
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let start = Instant::now();
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
            if let Ok(Some(status)) = driver.child.try_wait() {
                panic!("chromedriver exited at start: {status}");
            }
            assert!(
                start.elapsed() < PATIENCE,
                "chromedriver did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        driver
    }

    /// The argument that marks this driver's browsers (its port's).
    pub fn marker(&self) -> String {
        format!("--scheduler-test-driver={}", self.url)
    }

    /// A headless Chromium session (`--no-sandbox`: CI runs as root).
    pub async fn session(&self) -> Client {
        self.session_sized(1440, 1000).await
    }

    /// A headless Chromium session with a window `width` × `height`.
    pub async fn session_sized(&self, width: u32, height: u32) -> Client {
        let capabilities = serde_json::json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": self.chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-dev-shm-usage",
                    "--disable-gpu",
                    format!("--window-size={width},{height}"),
                    // Unknown to Chromium: marks this driver's browsers for
                    // `browsers_of`.
                    self.marker(),
                ],
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        // Asked again while chromedriver is busy starting another browser (a CI run
        // saw one session request refused at connect with chromedriver listening).
        let start = Instant::now();
        loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&self.url)
                .await
            {
                Ok(client) => return client,
                Err(e) if start.elapsed() >= PATIENCE => {
                    panic!("no browser session from chromedriver at {}: {e}", self.url)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory for one test, removed when the test passes and kept (its path
/// printed) when it fails.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "scheduler-web-{label}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept the test's directory: {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// How many processes run with `marker` among their arguments (Linux: read from
/// `/proc`): the browsers of the driver that marked them.
pub fn browsers_of(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|cmdline| {
            cmdline
                .split(|&b| b == 0)
                .any(|arg| arg == marker.as_bytes())
        })
        .count()
}
