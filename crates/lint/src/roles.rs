//! The contract's rule (issue 38, item 1): a driver changes a role only through `Node`, or by one
//! of the direct calls `crates/proto/src/node.rs` lists under **Direct calls** with its reason.
//!
//! Read from the source text: the roles' public `&mut self` methods are collected from their
//! files, and every call `.name(` of one of them in a driver crate's non-test code is a breach
//! unless the list names it. A call on `self` (`self.name(`) is the driver's own method of the
//! same name, not the role's. The rule is by name, not by type: a driver type with a method of a
//! role's name, called on another value, is reported too — rename it or call it through `self`.

use crate::{functions_of, is_test_file, test_lines};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The files that hold the roles' inherent methods.
const ROLE_FILES: &[&str] = &[
    "crates/proto/src/host.rs",
    "crates/proto/src/host",
    "crates/proto/src/switch.rs",
    "crates/proto/src/switch",
    "crates/proto/src/aggregator.rs",
    "crates/proto/src/failure.rs",
    "crates/proto/src/failure",
    "crates/ctrlstore/src/ha.rs",
    "crates/baselines/src/unordered.rs",
];

/// The crates that drive roles.
pub const DRIVERS: &[&str] = &[
    "crates/sim/src",
    "crates/runtime/src",
    "crates/cli/src",
    "crates/onepipe/src",
];

/// Where the contract lists the direct calls.
const CONTRACT: &str = "crates/proto/src/node.rs";

/// The public methods of the roles that take `&mut self`.
pub fn role_mutators(root: &Path) -> Result<BTreeSet<String>, String> {
    let mut files = Vec::new();
    for f in ROLE_FILES {
        let p = root.join(f);
        if p.is_dir() {
            crate::collect(&p, &mut files).map_err(|e| format!("{}: {e}", p.display()))?;
        } else {
            files.push(p);
        }
    }
    let mut names = BTreeSet::new();
    for path in files.iter().filter(|p| !is_test_file(p)) {
        let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let lines: Vec<&str> = text.lines().collect();
        for f in functions_of(&text).into_iter().filter(|f| !f.test) {
            let decl = lines[f.line - 1].trim_start();
            if !decl.starts_with("pub fn ") {
                continue;
            }
            let sig_end = (f.line - 1..lines.len())
                .find(|&j| lines[j].trim_end().ends_with('{'))
                .unwrap_or(f.line - 1);
            let sig = lines[f.line - 1..=sig_end].join(" ");
            // `Node`'s own methods are the contract: a call by their name is one through it.
            let node = matches!(f.name.as_str(), "handle" | "poll_output" | "poll_timeout");
            if sig.contains("&mut self") && !node {
                names.insert(f.name);
            }
        }
    }
    Ok(names)
}

/// The names the contract's **Direct calls** list allows: every backquoted name before the dash
/// of each bullet.
pub fn allowed(root: &Path) -> Result<BTreeSet<String>, String> {
    let path = root.join(CONTRACT);
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let start = text
        .find("//! **Direct calls.**")
        .ok_or_else(|| format!("{CONTRACT} has no **Direct calls.** list"))?;
    let mut names = BTreeSet::new();
    for line in text[start..].lines().skip(1) {
        let Some(rest) = line.strip_prefix("//!") else {
            break;
        };
        let Some(bullet) = rest.strip_prefix(" * ") else {
            if names.is_empty() || rest.starts_with("   ") {
                continue; // the paragraph before the list, or a bullet's second line
            }
            break;
        };
        let head = bullet.split(" — ").next().unwrap_or("");
        for (i, part) in head.split('`').enumerate() {
            if i % 2 == 1 {
                names.insert(part.to_string());
            }
        }
    }
    if names.is_empty() {
        return Err(format!("{CONTRACT}'s **Direct calls.** list names nothing"));
    }
    Ok(names)
}

/// One call the contract's or the loop's rule does not allow.
pub struct Breach {
    pub file: PathBuf,
    pub line: usize,
    pub name: String,
}

/// Every call in the drivers' non-test code of a name in `mutators` and not in `allowed`.
pub fn breaches(
    root: &Path,
    mutators: &BTreeSet<String>,
    allowed: &BTreeSet<String>,
) -> Result<Vec<Breach>, String> {
    let forbidden: Vec<&String> = mutators.iter().filter(|m| !allowed.contains(*m)).collect();
    let mut out = Vec::new();
    for path in &source_files(root, DRIVERS)? {
        let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let lines: Vec<&str> = text.lines().collect();
        let test = test_lines(&lines);
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if test[i] || code.trim().is_empty() {
                continue;
            }
            for name in &forbidden {
                if calls(code, name) {
                    out.push(Breach {
                        file: path.clone(),
                        line: i + 1,
                        name: (*name).clone(),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Whether `code` calls `.name(` on something other than `self`.
fn calls(code: &str, name: &str) -> bool {
    let pat = format!(".{name}(");
    code.match_indices(&pat)
        .any(|(at, _)| !code[..at].ends_with("self"))
}

/// The non-test `.rs` files under `dirs` (relative to `root`), sorted.
pub fn source_files(root: &Path, dirs: &[&str]) -> Result<Vec<std::path::PathBuf>, String> {
    let mut files = Vec::new();
    for d in dirs {
        let p = root.join(d);
        crate::collect(&p, &mut files).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    files.retain(|p| !is_test_file(p));
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::calls;

    #[test]
    fn a_call_on_another_value_counts_and_one_on_self_does_not() {
        assert!(calls("        h.recover(now);", "recover"));
        assert!(calls("    self.host.recover(now)", "recover"));
        assert!(!calls("    self.recover(now)", "recover"));
        assert!(!calls("    x.recovered(now)", "recover"));
    }
}
