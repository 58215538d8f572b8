//! The loop's rule (issue 38, item 2): a driver drains a role only through `onepipe_proto::drive`,
//! the loop written once (`crates/proto/src/drive.rs`), never by a `poll_output` loop of its own;
//! nor an application by a `poll_send` loop (applications are driven as `AppNode`s, issue 38
//! item 1).
//!
//! Read from the source text: every `.poll_output()` or `.poll_send()` call in a driver crate's
//! non-test code is a breach, except inside a `fn poll_output` or `fn poll_send` (a `Node` or an
//! `App` that wraps another hands its outputs on one at a time: that is the contract, not a
//! loop). Roles that drain the roles they wrap as part of being roles (the aggregator's two
//! switches, `AppNode`'s application) live in proto, and the applications' own code and tests
//! in apps: both outside this rule.

use crate::roles::{source_files, Breach, DRIVERS};
use crate::{functions_of, test_lines};
use std::fs;
use std::path::Path;

/// Driver code beyond the contract rule's drivers: the HA controller drives the controller it
/// wraps.
const MORE_DRIVERS: &[&str] = &["crates/ctrlstore/src"];

/// The drains a driver leaves to `onepipe_proto::drive`: a role's outputs, an application's
/// sends.
const DRAINS: &[&str] = &["poll_output", "poll_send"];

/// Every `.poll_output()` or `.poll_send()` call in the drivers' non-test code outside a
/// function of one of those names.
pub fn breaches(root: &Path) -> Result<Vec<Breach>, String> {
    let dirs: Vec<&str> = DRIVERS.iter().chain(MORE_DRIVERS).copied().collect();
    let mut out = Vec::new();
    for path in &source_files(root, &dirs)? {
        let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.extend(
            lines_breaking(&text)
                .into_iter()
                .map(|(line, name)| Breach {
                    file: path.clone(),
                    line,
                    name: name.into(),
                }),
        );
    }
    Ok(out)
}

/// The (1-based) lines of `text` that call one of [`DRAINS`] outside tests and outside a
/// function of one of their names, each with the name it calls.
fn lines_breaking(text: &str) -> Vec<(usize, &'static str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut exempt = test_lines(&lines);
    for f in functions_of(text)
        .into_iter()
        .filter(|f| DRAINS.contains(&f.name.as_str()))
    {
        exempt[f.line - 1..f.line - 1 + f.lines]
            .iter_mut()
            .for_each(|e| *e = true);
    }
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for name in DRAINS {
            if !exempt[i] && code.contains(&format!(".{name}()")) {
                out.push((i + 1, *name));
            }
        }
    }
    out
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
        assert_eq!(
            lines_breaking(text),
            [(2, "poll_output"), (7, "poll_output")]
        );
    }

    #[test]
    fn a_drivers_own_poll_send_loop_breaks_the_rule_as_a_poll_output_loop_does() {
        let text = "\
fn drain_app(&mut self, p: usize) {
    while let Some(s) = self.apps.app(p).poll_send() {
        self.send(s);
    }
}
fn sends(&mut self) -> Vec<AppSend> {
    std::iter::from_fn(|| self.app.poll_send()).collect() // nor an iterator
}
impl App for Wrapper {
    fn poll_send(&mut self) -> Option<AppSend> {
        self.0.poll_send()
    }
}
impl Node for AppNode<A> {
    fn poll_output(&mut self) -> Option<O> {
        let s = self.app.poll_send()?;
        Some(Output::Send { port: HOST_PORT, packet: AppIo::Send(s) })
    }
}
fn ok(&mut self) {
    // a comment may say .poll_send()
    drive::drain_in(self, |w| w.app_node(p), |w, o| w.app_send(o));
}
#[cfg(test)]
mod tests {
    fn drain(a: &mut A) {
        while a.poll_send().is_some() {}
    }
}
";
        assert_eq!(lines_breaking(text), [(2, "poll_send"), (7, "poll_send")]);
    }
}
