//! Builds and runs the `quickstart` example for a few seconds and checks its jobs ran.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    // target/debug/deps/quickstart-HASH -> target/debug/examples/NAME
    let exe = std::env::current_exe().unwrap_or_default();
    let debug = exe
        .parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    debug.join("examples").join(name)
}

#[test]
fn quickstart_runs_its_three_jobs() {
    let dir = std::env::temp_dir().join(format!("quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("temp dir: {e}"));
    let bin = example("quickstart");
    assert!(
        bin.exists(),
        "{} was not built (cargo test builds examples)",
        bin.display()
    );
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
