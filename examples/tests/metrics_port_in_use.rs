#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The `metrics` example started on a port something else listens on stops at once
//! with a message naming the port and the flag that picks another, not an OS error's
//! `Debug` form.

mod support;

use std::net::TcpListener;
use std::process::Command;

use support::{example, temp_dir};

#[test]
fn a_busy_port_says_which_flag_picks_another() {
    let dir = temp_dir("metrics-port-in-use");
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = busy.local_addr().expect("local address").port();
    let out = Command::new(example("metrics"))
        .args(["--port", &port.to_string(), "--seconds", "30"])
        .arg("--db")
        .arg(dir.join("metrics.db"))
        .current_dir(&dir)
        .env_remove("NO_COLOR")
        .output()
        .expect("run metrics");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!("Error: port {port} is in use; pass --port N (0 picks a free port)")
    );
    drop(busy);
    let _ = std::fs::remove_dir_all(&dir);
}
