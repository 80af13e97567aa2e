//! The workspace as `cargo metadata` describes it, read for what publishing needs:
//! which crates are public, the `rust-version` each declares, and the newest one its
//! dependencies declare.
//!
//! The tests in `tests/` run the checks on this workspace; the unit tests below run
//! them on made-up metadata, to show that they fail when they should.

pub mod layout;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use serde::Deserialize;

/// What can go wrong reading the workspace's metadata.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `cargo metadata` could not be started.
    #[error("could not run `cargo metadata`: is cargo on the PATH?")]
    Spawn(#[source] std::io::Error),
    /// `cargo metadata` failed.
    #[error("`cargo metadata` failed: {stderr}")]
    Cargo {
        /// What cargo printed on stderr.
        stderr: String,
    },
    /// Its output was not the JSON of `--format-version 1`.
    #[error("`cargo metadata` printed something other than format version 1")]
    Json(#[source] serde_json::Error),
    /// A `rust-version` that is not `MAJOR.MINOR[.PATCH]`.
    #[error("package {package} declares rust-version `{value}`, expected MAJOR.MINOR[.PATCH]")]
    RustVersion {
        /// The package that declares it.
        package: String,
        /// What it declares.
        value: String,
    },
    /// The metadata has no dependency graph (it was read with `--no-deps`).
    #[error(
        "the metadata has no resolved dependency graph: run `cargo metadata` without --no-deps"
    )]
    NoResolve,
}

/// A Rust release, as a `rust-version` names it (`1.94` is `1.94.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RustVersion {
    major: u64,
    minor: u64,
    patch: u64,
}

impl FromStr for RustVersion {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        let mut parts = s.split('.').map(|p| p.parse::<u64>().map_err(|_| ()));
        let major = parts.next().ok_or(())??;
        let minor = parts.next().ok_or(())??;
        let patch = parts.next().transpose()?.unwrap_or(0);
        if parts.next().is_some() {
            return Err(());
        }
        Ok(Self {
            major,
            minor,
            patch,
        })
    }
}

impl fmt::Display for RustVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A public crate whose dependencies need a newer Rust than it declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooOld {
    /// The public crate.
    pub package: String,
    /// Its declared `rust-version` (`None`: it declares none).
    pub declared: Option<RustVersion>,
    /// The dependency with the newest `rust-version`, as `name vVERSION`.
    pub dependency: String,
    /// That dependency's `rust-version`.
    pub needs: RustVersion,
}

impl fmt::Display for TooOld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let declared = self
            .declared
            .map_or_else(|| "none".to_owned(), |v| v.to_string());
        write!(
            f,
            "{} declares rust-version {declared}, but its dependency {} needs {}",
            self.package, self.dependency, self.needs
        )
    }
}

/// The output of `cargo metadata --format-version 1`, the fields read here.
#[derive(Debug, Deserialize)]
pub struct Metadata {
    packages: Vec<Package>,
    workspace_members: Vec<String>,
    resolve: Option<Resolve>,
}

/// One package of the metadata.
#[derive(Debug, Deserialize)]
pub struct Package {
    /// Its id in the dependency graph.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its `rust-version`, as written.
    pub rust_version: Option<String>,
    /// The registries it may be published to: `Some([])` for `publish = false`.
    pub publish: Option<Vec<String>>,
    /// Its `Cargo.toml`.
    pub manifest_path: PathBuf,
    /// Its `description`.
    pub description: Option<String>,
    /// Its `license` expression.
    pub license: Option<String>,
    /// Its `readme`.
    pub readme: Option<PathBuf>,
    /// Its `documentation` URL.
    pub documentation: Option<String>,
    /// Its `repository` URL.
    pub repository: Option<String>,
    /// Its `keywords`.
    pub keywords: Vec<String>,
    /// Its `categories`.
    pub categories: Vec<String>,
}

impl Package {
    /// Whether it may be published (no `publish = false`).
    pub fn is_public(&self) -> bool {
        self.publish
            .as_ref()
            .is_none_or(|registries| !registries.is_empty())
    }

    /// The folder of its `Cargo.toml`.
    pub fn dir(&self) -> &Path {
        self.manifest_path.parent().unwrap_or(Path::new("."))
    }

    fn declared_rust_version(&self) -> Result<Option<RustVersion>, Error> {
        self.rust_version
            .as_deref()
            .map(|value| {
                value.parse().map_err(|()| Error::RustVersion {
                    package: self.name.clone(),
                    value: value.to_owned(),
                })
            })
            .transpose()
    }
}

#[derive(Debug, Deserialize)]
struct Resolve {
    nodes: Vec<Node>,
}

#[derive(Debug, Deserialize)]
struct Node {
    id: String,
    deps: Vec<NodeDep>,
}

#[derive(Debug, Deserialize)]
struct NodeDep {
    pkg: String,
    dep_kinds: Vec<DepKind>,
}

#[derive(Debug, Deserialize)]
struct DepKind {
    /// `None` for a normal dependency, else `"dev"` or `"build"`.
    kind: Option<String>,
}

impl NodeDep {
    /// Whether a user of the crate builds it: a normal or build dependency, on any target.
    fn is_built_by_users(&self) -> bool {
        self.dep_kinds
            .iter()
            .any(|k| k.kind.as_deref() != Some("dev"))
    }
}

impl Metadata {
    /// Runs `cargo metadata --format-version 1 --locked` on this workspace (every
    /// target platform, every package in `Cargo.lock`).
    ///
    /// # Errors
    ///
    /// When cargo cannot be run, fails, or prints something else than expected.
    pub fn of_workspace() -> Result<Self, Error> {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = Command::new(cargo)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--locked",
                "--manifest-path",
            ])
            .arg(manifest)
            .output()
            .map_err(Error::Spawn)?;
        if !output.status.success() {
            return Err(Error::Cargo {
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Self::from_json(&output.stdout)
    }

    /// Reads the output of `cargo metadata --format-version 1`.
    ///
    /// # Errors
    ///
    /// When it is not that.
    pub fn from_json(json: &[u8]) -> Result<Self, Error> {
        serde_json::from_slice(json).map_err(Error::Json)
    }

    /// The workspace's crates, public or not.
    pub fn members(&self) -> Vec<&Package> {
        self.workspace_members
            .iter()
            .filter_map(|id| self.package(id))
            .collect()
    }

    /// The workspace's crates that are published (`publish` not `false`).
    pub fn public_crates(&self) -> Vec<&Package> {
        let mut public: Vec<&Package> = self
            .workspace_members
            .iter()
            .filter_map(|id| self.package(id))
            .filter(|p| p.is_public())
            .collect();
        public.sort_by(|a, b| a.name.cmp(&b.name));
        public
    }

    /// Every public crate whose declared `rust-version` is older than one of the
    /// `rust-version`s its dependencies declare: the normal and build dependencies,
    /// transitively, on every target (not the dev-dependencies, which its users never
    /// build). The features are the ones the whole workspace resolves, so a
    /// dependency enabled only for another crate counts too: the check errs on the
    /// side of a newer Rust.
    ///
    /// # Errors
    ///
    /// A `rust-version` that does not parse, or metadata without a dependency graph.
    pub fn rust_version_too_old(&self) -> Result<Vec<TooOld>, Error> {
        let resolve = self.resolve.as_ref().ok_or(Error::NoResolve)?;
        let nodes: HashMap<&str, &Node> =
            resolve.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
        let mut too_old = Vec::new();
        for krate in self.public_crates() {
            let declared = krate.declared_rust_version()?;
            let mut newest: Option<(RustVersion, &Package)> = None;
            let mut seen = BTreeSet::from([krate.id.as_str()]);
            let mut queue = VecDeque::from([krate.id.as_str()]);
            while let Some(id) = queue.pop_front() {
                let Some(node) = nodes.get(id) else { continue };
                for dep in node.deps.iter().filter(|d| d.is_built_by_users()) {
                    if !seen.insert(dep.pkg.as_str()) {
                        continue;
                    }
                    queue.push_back(dep.pkg.as_str());
                    let Some(package) = self.package(&dep.pkg) else {
                        continue;
                    };
                    if let Some(needs) = package.declared_rust_version()?
                        && newest.is_none_or(|(v, _)| needs > v)
                    {
                        newest = Some((needs, package));
                    }
                }
            }
            if let Some((needs, dependency)) = newest
                && declared.is_none_or(|d| d < needs)
            {
                too_old.push(TooOld {
                    package: krate.name.clone(),
                    declared,
                    dependency: format!("{} v{}", dependency.name, dependency.version),
                    needs,
                });
            }
        }
        Ok(too_old)
    }

    fn package(&self, id: &str) -> Option<&Package> {
        self.packages.iter().find(|p| p.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metadata of a workspace with one public crate `app` (rust-version
    /// `app_rust`) and one internal crate: `app` depends on `lib` (normal), `gen`
    /// (build) and `bench` (dev), `lib` on `deep`.
    fn metadata(
        app_rust: Option<&str>,
        lib: &str,
        deep: &str,
        gen_: &str,
        bench: &str,
    ) -> Metadata {
        let package = |name: &str, rust: Option<&str>, publish: serde_json::Value| {
            serde_json::json!({
                "id": format!("{name}-id"), "name": name, "version": "1.0.0",
                "rust_version": rust, "publish": publish,
                "manifest_path": format!("/w/{name}/Cargo.toml"),
                "description": null, "license": null, "readme": null,
                "documentation": null, "repository": null, "keywords": [], "categories": [],
            })
        };
        let dep = |name: &str, kind: Option<&str>| serde_json::json!({ "pkg": format!("{name}-id"), "dep_kinds": [{ "kind": kind, "target": null }] });
        let json = serde_json::json!({
            "packages": [
                package("app", app_rust, serde_json::Value::Null),
                package("internal", Some("1.0"), serde_json::json!([])),
                package("lib", Some(lib), serde_json::Value::Null),
                package("deep", Some(deep), serde_json::Value::Null),
                package("gen", Some(gen_), serde_json::Value::Null),
                package("bench", Some(bench), serde_json::Value::Null),
            ],
            "workspace_members": ["app-id", "internal-id"],
            "resolve": { "nodes": [
                { "id": "app-id", "deps": [dep("lib", None), dep("gen", Some("build")), dep("bench", Some("dev"))] },
                { "id": "internal-id", "deps": [dep("deep", None)] },
                { "id": "lib-id", "deps": [dep("deep", None)] },
                { "id": "deep-id", "deps": [] },
                { "id": "gen-id", "deps": [] },
                { "id": "bench-id", "deps": [] },
            ]},
        });
        Metadata::from_json(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn rust_versions_compare_as_numbers() {
        let v = |s: &str| s.parse::<RustVersion>().unwrap();
        assert_eq!(v("1.94"), v("1.94.0"));
        assert!(v("1.100") > v("1.94.1"));
        assert!(v("1.94.1") > v("1.94"));
        assert!("1".parse::<RustVersion>().is_err());
        assert!("1.94.0.1".parse::<RustVersion>().is_err());
        assert!("1.x".parse::<RustVersion>().is_err());
    }

    #[test]
    fn a_declaration_as_new_as_every_dependency_passes() {
        let m = metadata(Some("1.94"), "1.90", "1.94.0", "1.80", "1.99");
        assert_eq!(m.rust_version_too_old().unwrap(), []);
        let names: Vec<_> = m.public_crates().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["app"]);
    }

    #[test]
    fn a_transitive_dependency_newer_than_the_declaration_fails() {
        let m = metadata(Some("1.88"), "1.85", "1.94", "1.80", "1.70");
        let too_old = m.rust_version_too_old().unwrap();
        assert_eq!(too_old.len(), 1);
        assert_eq!(
            too_old[0].to_string(),
            "app declares rust-version 1.88.0, but its dependency deep v1.0.0 needs 1.94.0"
        );
    }

    #[test]
    fn a_build_dependency_counts() {
        let m = metadata(Some("1.88"), "1.85", "1.85", "1.89", "1.70");
        assert_eq!(
            m.rust_version_too_old().unwrap()[0].dependency,
            "gen v1.0.0"
        );
    }

    #[test]
    fn no_declaration_fails_when_a_dependency_declares_one() {
        let m = metadata(None, "1.85", "1.85", "1.80", "1.70");
        assert_eq!(m.rust_version_too_old().unwrap()[0].declared, None);
    }

    #[test]
    fn dev_dependencies_do_not_count() {
        let m = metadata(Some("1.88"), "1.85", "1.85", "1.80", "1.99");
        assert_eq!(m.rust_version_too_old().unwrap(), []);
    }
}
