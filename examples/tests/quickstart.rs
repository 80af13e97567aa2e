//! Builds and runs the `quickstart` example for a few seconds and checks its jobs ran.

mod support;

use std::process::Command;

use support::{example, temp_dir};

#[test]
fn quickstart_runs_its_three_jobs() {
    let dir = temp_dir("quickstart");
    let bin = example("quickstart");
    let out = Command::new(&bin)
        .args(["--seconds", "5"])
        .current_dir(&dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "quickstart failed: {stdout}\n{stderr}"
    );
    for job in ["ran heartbeat", "ran node_report", "ran slow-sweep"] {
        assert!(
            stdout.contains(job),
            "no `{job}` in the output:\n{stdout}\n{stderr}"
        );
    }
    assert!(
        dir.join("scheduler.db").exists(),
        "the SQLite file was created in the working directory"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
