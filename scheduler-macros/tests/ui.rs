//! What `#[job]` accepts and what it refuses, with the messages it refuses with.
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p scheduler-macros --test ui`
//! and read every one: the message must point at the offending token and say what to do.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
