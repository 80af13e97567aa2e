//! The workspace's `rust-version` is what its dependencies really need: no public
//! crate declares an older Rust than a dependency it builds for its users declares.

use scheduler_packaging::Metadata;

#[test]
fn no_dependency_needs_a_newer_rust_than_declared() {
    let metadata = Metadata::of_workspace().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        metadata
            .public_crates()
            .iter()
            .any(|p| p.name == "scheduler-core"),
        "no public crate found: is scheduler-core marked publish = false?"
    );
    let too_old = metadata
        .rust_version_too_old()
        .unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<String> = too_old.iter().map(ToString::to_string).collect();
    assert!(
        lines.is_empty(),
        "raise `rust-version` in the root Cargo.toml's [workspace.package] (or choose \
         older dependencies):\n{}",
        lines.join("\n")
    );
}
