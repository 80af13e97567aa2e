#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The `dashboard` example serves the scheduler's dashboard on 127.0.0.1: its jobs
//! and its dynamic schedule are listed, with their runs; a busy port stops it at
//! once with a message naming the flag that picks another.

mod support;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{example, temp_dir};

/// Kills the example when the test ends, passed or not.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The status line and body of `GET path`.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the example");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

#[test]
fn the_dashboard_example_serves_its_jobs_and_their_runs() {
    let dir = temp_dir("dashboard-example");
    let mut child = Running(
        Command::new(example("dashboard"))
            .args(["--port", "0", "--seconds", "120", "--node", "example-node"])
            .arg("--db")
            .arg(dir.join("dashboard.db"))
            .current_dir(&dir)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run the dashboard example"),
    );
    let mut stdout = BufReader::new(child.0.stdout.take().expect("stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the first line");
    // Keep reading what it prints, so that its stdout stays open.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let addr = first
        .trim_end()
        .strip_prefix("dashboard on http://")
        .and_then(|rest| rest.strip_suffix("/scheduler"))
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .to_owned();

    let (status, _) = get(&addr, "/");
    assert!(
        status.contains(" 303 "),
        "/ redirects to the dashboard: {status}"
    );
    let start = Instant::now();
    loop {
        let (status, body) = get(&addr, "/scheduler/jobs");
        assert!(status.contains(" 200 "), "{status}");
        for job in [
            "heartbeat",
            "flaky",
            "slow-report",
            "nightly-digest",
            "tenant-42-report",
        ] {
            assert!(body.contains(job), "{job} listed");
        }
        assert!(body.contains("actions enabled") && body.contains("example-node"));
        // A run of heartbeat (every second), as the run history recorded it.
        if body.contains("succeeded") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no run shown within a minute: {body}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let (status, body) = get(&addr, "/scheduler/job?name=heartbeat");
    assert!(
        status.contains(" 200 ") && body.contains("data-run="),
        "{body}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_busy_port_says_which_flag_picks_another() {
    let dir = temp_dir("dashboard-port-in-use");
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = busy.local_addr().expect("local address").port();
    let out = Command::new(example("dashboard"))
        .args(["--port", &port.to_string(), "--seconds", "30"])
        .arg("--db")
        .arg(dir.join("dashboard.db"))
        .current_dir(&dir)
        .output()
        .expect("run the dashboard example");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!("Error: port {port} is in use; pass --port N (0 picks a free port)")
    );
    drop(busy);
    let _ = std::fs::remove_dir_all(&dir);
}
