//! The loop's rule (issue 38, item 2): a driver drains a role only through `onepipe_proto::drive`,
//! the loop written once (`crates/proto/src/drive.rs`), never by a `poll_output` loop of its own.
//!
//! Read from the source text: every `.poll_output()` call in a driver crate's non-test code is a
//! breach, except inside a `fn poll_output` (a `Node` that wraps another hands its outputs on
//! one at a time: that is the contract, not a loop). Roles that drain the roles they wrap as
//! part of being roles (the aggregator's two switches) live in proto, outside this rule.

use crate::roles::{source_files, Breach, DRIVERS};
use crate::{functions_of, test_lines};
use std::fs;
use std::path::Path;

/// Driver code beyond the contract rule's drivers: the HA controller drives the controller it
/// wraps.
const MORE_DRIVERS: &[&str] = &["crates/ctrlstore/src"];

/// Every `.poll_output()` call in the drivers' non-test code outside a `fn poll_output`.
pub fn breaches(root: &Path) -> Result<Vec<Breach>, String> {
    let dirs: Vec<&str> = DRIVERS.iter().chain(MORE_DRIVERS).copied().collect();
    let mut out = Vec::new();
    for path in &source_files(root, &dirs)? {
        let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.extend(lines_breaking(&text).into_iter().map(|line| Breach {
            file: path.clone(),
            line,
            name: "poll_output".into(),
        }));
    }
    Ok(out)
}

/// The (1-based) lines of `text` that call `.poll_output()` outside tests and outside a
/// `fn poll_output`.
fn lines_breaking(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut exempt = test_lines(&lines);
    for f in functions_of(text)
        .into_iter()
        .filter(|f| f.name == "poll_output")
    {
        exempt[f.line - 1..f.line - 1 + f.lines]
            .iter_mut()
            .for_each(|e| *e = true);
    }
    lines
        .iter()
        .enumerate()
        .filter(|&(i, line)| {
            !exempt[i]
                && line
                    .split("//")
                    .next()
                    .unwrap_or("")
                    .contains(".poll_output()")
        })
        .map(|(i, _)| i + 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::lines_breaking;

    #[test]
    fn a_drivers_own_loop_breaks_the_rule_and_a_forwarding_node_does_not() {
        let text = "\
fn drain(&mut self) {
    while let Some(o) = self.node.poll_output() {
        self.sink(o);
    }
}
fn outputs(&mut self) -> Vec<O> {
    std::iter::from_fn(|| self.ctrl.poll_output()).collect() // nor an iterator
}
impl Node for Wrapper {
    fn poll_output(&mut self) -> Option<O> {
        self.inner.poll_output()
    }
}
fn ok(&mut self) {
    // a comment may say .poll_output()
    drive::turn(&mut self.node, None, |o| self.sink(o));
}
#[cfg(test)]
mod tests {
    fn drain(n: &mut N) {
        while n.poll_output().is_some() {}
    }
}
";
        assert_eq!(lines_breaking(text), [2, 7]);
    }
}
