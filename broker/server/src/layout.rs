//! Tests of the crate's source layout: the rules of docs/architecture.md that the compiler does
//! not check.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `src`, with its text up to its unit tests (`#[cfg(test)]`) and without
/// comments. Files named `tests.rs` are test modules and left out.
fn sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            if !rel.ends_with(".rs") || rel.ends_with("tests.rs") || rel == "layout.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let code: Vec<&str> = code.lines().map(|l| l.split("//").next().unwrap_or_default()).collect();
            out.insert(rel.trim_end_matches(".rs").to_string(), code.join("\n"));
        }
    }
    out
}

/// No file other than errors.rs names a Kafka error code: they return a `BrokerError` (or a
/// `GroupError`) and errors.rs chooses the code.
#[test]
fn errors_are_mapped_in_one_place() {
    let mut offenders = Vec::new();
    for (file, code) in sources() {
        if file == "errors" {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            let numeric = line
                .split("error_code = ")
                .nth(1)
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit() || c == '-') && !r.starts_with('0'));
            if line.contains("ResponseError") || numeric {
                offenders.push(format!("{file}.rs:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "Kafka error codes chosen outside errors.rs:\n{}", offenders.join("\n"));
}

/// The files of this crate form no cycle: each uses (`crate::x`, `super::x`) only files below it.
#[test]
fn no_file_cycles() {
    let files = sources();
    let names: BTreeSet<String> = files.keys().map(|f| f.replace('/', "::")).collect();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, code) in &files {
        let me = file.replace('/', "::");
        let parent = me.rsplit_once("::").map(|(p, _)| p.to_string());
        let mut deps = BTreeSet::new();
        let idents = |s: &str| -> Vec<String> {
            s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).map(str::to_string).collect()
        };
        // `crate::a::b` and `crate::{a, b::c}`, `super::a`.
        let mut paths = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + 7..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or_default();
                paths.extend(group.split(',').map(|p| p.trim().to_string()));
            } else {
                paths.extend(idents(rest).into_iter().take(1));
            }
        }
        for (i, _) in code.match_indices("super::") {
            if let Some(first) = idents(&code[i + 7..]).first() {
                let base = parent.clone().map_or(first.clone(), |p| format!("{p}::{first}"));
                paths.push(base.clone());
                if !names.contains(&base) {
                    paths.extend(parent.clone());
                }
            }
        }
        for p in paths {
            let parts: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
            if let Some(m) = (1..=parts.len()).rev().map(|n| parts[..n].join("::")).find(|m| names.contains(m)) {
                deps.insert(m);
            }
        }
        // The crate root's re-exports.
        for (name, module) in [("Broker", "broker"), ("BrokerConfig", "config"), ("ConfigError", "config")] {
            let path = format!("crate::{name}");
            let named = code
                .match_indices(&path)
                .any(|(i, _)| !code[i + path.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'));
            if named {
                deps.insert(module.to_string());
            }
        }
        deps.remove(&me);
        deps.remove("lib");
        uses.insert(me, deps);
    }
    // Depth-first search for a back edge.
    fn visit(
        n: &str,
        uses: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| p == n).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(n.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for d in uses.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, uses, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in uses.keys() {
        if let Some(cycle) = visit(n, &uses, &mut state, &mut Vec::new()) {
            panic!("file cycle in broker/server: {}", cycle.join(" -> "));
        }
    }
    assert!(uses.len() > 30, "the source scan found only {} files", uses.len());
}

/// No file of this crate is longer than about 800 lines (tests included).
#[test]
fn no_file_over_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut long = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let lines = std::fs::read_to_string(&path).unwrap().lines().count();
                if lines > 800 {
                    long.push(format!("{}: {lines}", path.display()));
                }
            }
        }
    }
    assert!(long.is_empty(), "files over 800 lines: {long:?}");
}
