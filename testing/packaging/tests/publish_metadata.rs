//! Every public crate has what crates.io and docs.rs show, and ships its licence texts.

use scheduler_packaging::Metadata;

#[test]
fn public_crates_carry_the_metadata_crates_io_shows() {
    let metadata = Metadata::of_workspace().unwrap_or_else(|e| panic!("{e}"));
    let mut problems = Vec::new();
    for p in metadata.public_crates() {
        let mut problem = |what: &str| problems.push(format!("{}: {what}", p.name));
        if p.description.as_deref().is_none_or(str::is_empty) {
            problem("no description");
        }
        if p.license.as_deref() != Some("MIT OR Apache-2.0") {
            problem("license is not `MIT OR Apache-2.0`");
        }
        for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
            if !p.dir().join(file).is_file() {
                problem(&format!("no {file} beside its Cargo.toml"));
            }
        }
        if p.readme.as_ref().is_none_or(|r| !p.dir().join(r).is_file()) {
            problem("no readme, or its file is missing");
        }
        if p.documentation.as_deref() != Some(&format!("https://docs.rs/{}", p.name)) {
            problem("documentation is not its docs.rs page");
        }
        if p.keywords.is_empty() || p.keywords.len() > 5 {
            problem("crates.io takes one to five keywords");
        }
        if p.categories.is_empty() {
            problem("no categories");
        }
        if p.repository
            .as_deref()
            .is_some_and(|r| r.contains(".invalid"))
        {
            problem("a placeholder repository URL");
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
