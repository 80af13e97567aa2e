//! The shape of a crate's source tree: files too long to read in one sitting, and
//! import loops between sibling modules (a module that uses its sibling, which uses
//! it back, directly or around a longer loop).
//!
//! Read as text, without a parser: `use` trees, and `crate::…`/`super::…` paths in
//! code, of every file outside tests (a `tests.rs`, a `tests/` folder, and the body
//! of a `#[cfg(test)] mod` to the end of its file). A path counts as a dependency of
//! the module it is written in on the module it names, lifted to the two sibling
//! modules below the deepest module both lie in: `crate::a::b` used in `crate::c::d`
//! is an edge `a → c`'s reverse, `c → a`, under the crate root. Doc comments do not
//! count: a link is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A source file of `lines` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongFile {
    /// Its path.
    pub path: PathBuf,
    /// How many lines it has.
    pub lines: usize,
}

/// A dependency of one sibling module on another: where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// The module both lie in (`crate` for the root).
    pub parent: String,
    /// The module whose file writes the path.
    pub from: String,
    /// The module it names.
    pub to: String,
    /// The file and line that write it.
    pub at: String,
}

/// Source files as `(module path, file)`: `(["runtime", "engine"], …/engine/mod.rs)`.
pub type Sources = Vec<(Vec<String>, PathBuf)>;

/// The files of `src` (recursively) that are not tests: `(module path, file)`.
///
/// # Errors
/// When a folder or file cannot be read.
pub fn sources(src: &Path) -> std::io::Result<Sources> {
    let mut out = Vec::new();
    walk(src, src, &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Sources) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                walk(root, &path, out)?;
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let mut module: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if module
            .last()
            .is_some_and(|m| ["mod", "lib", "main"].contains(&m.as_str()))
        {
            module.pop();
        }
        if module.last().is_some_and(|m| m == "tests") {
            continue;
        }
        out.push((module, path));
    }
    Ok(())
}

/// The files of `files` longer than `most` lines.
///
/// # Errors
/// When a file cannot be read.
pub fn long_files(files: &[(Vec<String>, PathBuf)], most: usize) -> std::io::Result<Vec<LongFile>> {
    let mut long = Vec::new();
    for (_, path) in files {
        let lines = std::fs::read_to_string(path)?.lines().count();
        if lines > most {
            long.push(LongFile {
                path: path.clone(),
                lines,
            });
        }
    }
    Ok(long)
}

/// The code of `text` that counts: no comment lines, nothing from the first
/// `#[cfg(test)]` module on.
fn code(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            kept.push('\n');
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// The paths a `use` tree names (`a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`).
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim();
    if let Some(open) = tree.find('{')
        && tree.ends_with('}')
    {
        let prefix: Vec<String> = tree[..open]
            .trim_end_matches("::")
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let inner = &tree[open + 1..tree.len() - 1];
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0usize, 0usize);
        for (i, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    parts.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        return parts
            .into_iter()
            .filter(|p| !p.trim().is_empty())
            .flat_map(expand)
            .map(|tail| prefix.iter().cloned().chain(tail).collect())
            .collect();
    }
    let path = tree.split(" as ").next().unwrap_or(tree);
    vec![path.split("::").map(|s| s.trim().to_owned()).collect()]
}

/// Every `crate::…`/`super::…`/`self::…` path of `code`: in `use` trees and inline.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = find_word(rest, "use ") {
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        found.extend(expand(&after[..end]));
        rest = &after[end..];
    }
    for root in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(at) = find_word(rest, root) {
            let tail = &rest[at..];
            let len = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            found.push(
                tail[..len]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
            );
            rest = &tail[len..];
        }
    }
    found
}

/// Where `word` starts in `text` not preceded by part of an identifier or a `:`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let before = text[..at].chars().next_back();
        if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':')) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The module a path written in `module` names.
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("self") => Some(module.iter().chain(&path[1..]).cloned().collect()),
        Some("super") => {
            let mut base = module.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            Some(base.into_iter().chain(rest.iter().cloned()).collect())
        }
        _ => None,
    }
}

/// The edges between sibling modules of the files `files`.
///
/// # Errors
/// When a file cannot be read.
pub fn edges(files: &[(Vec<String>, PathBuf)]) -> std::io::Result<Vec<Edge>> {
    let mut out = Vec::new();
    for (module, path) in files {
        let text = code(&std::fs::read_to_string(path)?);
        for named in paths(&text) {
            let Some(target) = resolve(module, &named) else {
                continue;
            };
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from), Some(to)) = (module.get(common), target.get(common)) else {
                continue;
            };
            // Items (types, traits, constants) are not modules.
            if !to
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                continue;
            }
            let parent = if common == 0 {
                "crate".to_owned()
            } else {
                module[..common].join("::")
            };
            out.push(Edge {
                parent,
                from: from.clone(),
                to: to.clone(),
                at: path.display().to_string(),
            });
        }
    }
    Ok(out)
}

/// The loops among `edges`: each as its modules (`parent: a → b → a`) with one file
/// writing each step.
pub fn loops(edges: &[Edge]) -> Vec<String> {
    let mut graph: BTreeMap<(&str, &str), BTreeMap<&str, &str>> = BTreeMap::new();
    for e in edges {
        graph
            .entry((&e.parent, &e.from))
            .or_default()
            .entry(&e.to)
            .or_insert(&e.at);
    }
    let mut found = BTreeSet::new();
    for &(parent, start) in graph.keys() {
        // The shortest way back to `start`, breadth first.
        let mut came: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        'search: while let Some(at) = queue.pop_front() {
            for &next in graph.get(&(parent, at)).into_iter().flat_map(|m| m.keys()) {
                if next == start {
                    let mut way = vec![at];
                    while let Some(&prev) = came.get(way[way.len() - 1]) {
                        way.push(prev);
                    }
                    way.reverse();
                    let lowest = way.iter().min().copied().unwrap_or(start);
                    let turn = way.iter().position(|m| *m == lowest).unwrap_or(0);
                    way.rotate_left(turn);
                    let steps: Vec<String> = way
                        .iter()
                        .zip(way.iter().cycle().skip(1))
                        .map(|(a, b)| {
                            let at = graph
                                .get(&(parent, a))
                                .and_then(|m| m.get(b))
                                .copied()
                                .unwrap_or("?");
                            format!("{a} → {b} ({at})")
                        })
                        .collect();
                    found.insert(format!("{parent}: {}", steps.join(", ")));
                    break 'search;
                }
                if next != start && !came.contains_key(next) {
                    came.insert(next, at);
                    queue.push_back(next);
                }
            }
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempdir::Dir {
        let dir = tempdir::Dir::new();
        for (name, text) in files {
            let path = dir.0.join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
            }
            std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
        }
        dir
    }

    mod tempdir {
        pub(super) struct Dir(pub(super) std::path::PathBuf);

        impl Dir {
            pub(super) fn new() -> Self {
                let n = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or_default();
                let path = std::env::temp_dir().join(format!("layout-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{e}"));
                Dir(path)
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn loops_of(files: &[(&str, &str)]) -> Vec<String> {
        let dir = tree(files);
        let sources = sources(&dir.0).unwrap_or_else(|e| panic!("{e}"));
        loops(&edges(&sources).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn two_siblings_that_use_each_other_are_a_loop() {
        let found = loops_of(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", "use crate::{a::A, other};\npub struct B;\n"),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("crate: a → b"), "{found:?}");
    }

    #[test]
    fn a_loop_through_super_and_inline_paths_is_found_below_the_root() {
        let found = loops_of(&[
            ("run/mod.rs", "mod x;\nmod y;\n"),
            ("run/x.rs", "fn f() { super::y::g() }\n"),
            ("run/y.rs", "fn g() -> crate::run::x::T { T }\n"),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("run: x → y"), "{found:?}");
    }

    #[test]
    fn a_one_way_use_a_doc_link_a_parent_item_and_tests_are_no_loop() {
        let found = loops_of(&[
            (
                "a.rs",
                "use crate::b::B;\n/// See [`crate::b`].\nstruct A;\n",
            ),
            (
                "b.rs",
                "/// Used by [`crate::a::A`].\npub struct B;\nuse super::Thing;\n",
            ),
            ("b/tests.rs", "use crate::a::A;\n"),
            (
                "c.rs",
                "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n",
            ),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_three_module_loop_is_one_loop() {
        let found = loops_of(&[
            ("a.rs", "use crate::b::X;\n"),
            ("b.rs", "use crate::c::X;\n"),
            ("c.rs", "use crate::a::X;\n"),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("crate: a → b"), "{found:?}");
    }
}
