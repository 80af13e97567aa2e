//! What the tests that run the examples' binaries share.
#![allow(dead_code, unreachable_pub)] // each test file uses a part, and none exports it

use std::path::PathBuf;

/// The built example `name`: cargo builds the examples before it runs the tests.
pub fn example(name: &str) -> PathBuf {
    // target/debug/deps/TEST-HASH -> target/debug/examples/NAME
    let exe = std::env::current_exe().unwrap_or_default();
    let debug = exe
        .parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    let bin = debug.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} was not built (cargo test builds examples)",
        bin.display()
    );
    bin
}

/// A fresh directory for one test to run an example in.
pub fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}
