//! The workspace reads in parts: no public crate has a source file over 550 lines
//! outside tests (a module's long test table goes to a `tests.rs` beside it), and no
//! crate has an import loop between sibling modules (each module can be read knowing
//! only those it uses, never one that uses it back).

use scheduler_packaging::Metadata;
use scheduler_packaging::layout::{Sources, edges, long_files, loops, sources};

/// The longest a source file outside tests may be.
const MOST_LINES: usize = 550;

fn crate_sources(public_only: bool) -> Vec<(String, Sources)> {
    let metadata = Metadata::of_workspace().unwrap_or_else(|e| panic!("{e}"));
    let mut all = Vec::new();
    let packages = if public_only {
        metadata.public_crates()
    } else {
        metadata.members()
    };
    for package in packages {
        let src = package.dir().join("src");
        if src.is_dir() {
            let files = sources(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            all.push((package.name.clone(), files));
        }
    }
    assert!(
        all.iter().any(|(name, _)| name == "scheduler-core"),
        "scheduler-core's sources not found"
    );
    all
}

#[test]
fn no_source_file_outside_tests_is_over_550_lines() {
    let mut long = Vec::new();
    for (_, files) in crate_sources(true) {
        for f in long_files(&files, MOST_LINES).unwrap_or_else(|e| panic!("{e}")) {
            long.push(format!("{} ({} lines)", f.path.display(), f.lines));
        }
    }
    assert!(
        long.is_empty(),
        "split these files (tests go to a tests.rs beside the module):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_sibling_modules_import_each_other() {
    let mut found = Vec::new();
    for (name, files) in crate_sources(false) {
        let edges = edges(&files).unwrap_or_else(|e| panic!("{e}"));
        found.extend(loops(&edges).into_iter().map(|l| format!("{name}: {l}")));
    }
    assert!(
        found.is_empty(),
        "import loops (move what both sides need below them both, or to their parent):\n{}",
        found.join("\n")
    );
}
