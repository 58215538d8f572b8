//! `onepipe-lint`: the workspace's size rules and the driving contract's and loop's rules, read
//! from the source text (issue 38, items 5, 1 and 2).
//!
//! * no `.rs` file under `crates/` over `--max-file` lines (default 1,200), tests included;
//! * no function outside tests over `--max-fn` lines (default 80), counted from the `fn` line to
//!   its closing brace.
//!
//! It reads code as `rustfmt` writes it: a function's body ends at the first later line that is
//! its `fn` line's indentation followed by `}`. A function is a test's when its file is a test
//! file (under a `tests/` or `benches/` folder, or named `tests.rs`), when it carries `#[test]`,
//! or when it sits inside a `#[cfg(test)]` item. The contract's rule is in `roles.rs`; the loop's
//! rule (drivers drain roles and applications through `onepipe_proto::drive` only) in
//! `loops.rs`. Exit 0 when every rule holds, 1 with one line per breach, 2 on bad usage.

#![forbid(unsafe_code)]
#![allow(clippy::disallowed_methods)] // a source checker: reading files is its job

mod loops;
mod roles;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
onepipe-lint: check the workspace's size rules and that drivers change roles only through Node

usage: onepipe-lint [--root DIR] [--max-file N] [--max-fn N] [--all]

  --root DIR    the repository root (default: the current directory); reads DIR/crates/**.rs
  --max-file N  the most lines a source file may have (default 1200)
  --max-fn N    the most lines a non-test function may have (default 80)
  --all         also list the test functions over --max-fn (informational; never fails)

Besides the sizes, every call in the simulator, runtime, library or CLI of a role's public
`&mut self` method must be one crates/proto/src/node.rs lists under **Direct calls**, and none
of their non-test code may drain a role with its own `.poll_output()` loop, nor an application
with its own `.poll_send()` loop (onepipe_proto::drive is the loop).

Exit 0 when every rule holds, 1 with one line per breach (longest first), 2 on bad usage.";

struct Opts {
    root: PathBuf,
    max_file: usize,
    max_fn: usize,
    all: bool,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        root: PathBuf::from("."),
        max_file: 1200,
        max_fn: 80,
        all: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--root" => o.root = PathBuf::from(value("--root")?),
            "--max-file" => o.max_file = number("--max-file", &value("--max-file")?)?,
            "--max-fn" => o.max_fn = number("--max-fn", &value("--max-fn")?)?,
            "--all" => o.all = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn number(name: &str, s: &str) -> Result<usize, String> {
    s.parse()
        .map_err(|_| format!("{name} wants a whole number of lines, not {s:?}"))
}

/// One function found in a file: where it starts, how long it is, and whether it is a test's.
#[derive(Debug, PartialEq, Eq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
    test: bool,
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("onepipe-lint: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if e.is_empty() { 0 } else { 2 });
        }
    };
    let mut found = match sizes(&o) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("onepipe-lint: {e}");
            return ExitCode::from(2);
        }
    };
    match contract_breaches(&o.root) {
        Ok(b) => found
            .breaches
            .extend(b.into_iter().map(|b| (usize::MAX, b))),
        Err(e) => {
            eprintln!("onepipe-lint: the contract's rule could not be checked: {e}");
            return ExitCode::from(2);
        }
    }
    match loop_breaches(&o.root) {
        Ok(b) => found
            .breaches
            .extend(b.into_iter().map(|b| (usize::MAX, b))),
        Err(e) => {
            eprintln!("onepipe-lint: the loop's rule could not be checked: {e}");
            return ExitCode::from(2);
        }
    }
    found
        .breaches
        .sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found
        .notes
        .sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    for (_, b) in &found.breaches {
        println!("{b}");
    }
    if o.all {
        for (_, n) in &found.notes {
            println!("{n}");
        }
    }
    println!(
        "onepipe-lint: {} files, {} functions read; {} breaches",
        found.files,
        found.functions,
        found.breaches.len()
    );
    if found.breaches.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// What the size rules found: breaches and notes as (lines, report line), longest first once
/// sorted.
struct Found {
    files: usize,
    functions: usize,
    breaches: Vec<(usize, String)>,
    notes: Vec<(usize, String)>,
}

/// The size rules over every `.rs` file under `ROOT/crates`.
fn sizes(o: &Opts) -> Result<Found, String> {
    let mut files = Vec::new();
    let crates = o.root.join("crates");
    collect(&crates, &mut files).map_err(|e| format!("cannot read {}: {e}", crates.display()))?;
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "no .rs files under {}: nothing was checked",
            o.root.display()
        ));
    }
    let mut found = Found {
        files: files.len(),
        functions: 0,
        breaches: Vec::new(),
        notes: Vec::new(),
    };
    for path in &files {
        let text =
            fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let shown = path
            .strip_prefix(&o.root)
            .unwrap_or(path)
            .display()
            .to_string();
        let lines = text.lines().count();
        if lines > o.max_file {
            found.breaches.push((
                lines,
                format!("{shown}: {lines} lines (most {})", o.max_file),
            ));
        }
        let test_file = is_test_file(path);
        for f in functions_of(&text) {
            found.functions += 1;
            if f.lines <= o.max_fn {
                continue;
            }
            let at = format!("{shown}:{}: fn {}: {} lines", f.line, f.name, f.lines);
            if f.test || test_file {
                found.notes.push((f.lines, format!("{at} (a test's)")));
            } else {
                found
                    .breaches
                    .push((f.lines, format!("{at} (most {})", o.max_fn)));
            }
        }
    }
    Ok(found)
}

/// The contract's rule (`roles.rs`), as report lines.
fn contract_breaches(root: &Path) -> Result<Vec<String>, String> {
    let mutators = roles::role_mutators(root)?;
    if mutators.is_empty() {
        return Err("no role methods found (were the role files moved?)".into());
    }
    let allowed = roles::allowed(root)?;
    Ok(roles::breaches(root, &mutators, &allowed)?
        .into_iter()
        .map(|b| {
            format!(
                "{}:{}: calls a role's `{}` directly: not through Node, and not among the \
                 Direct calls of crates/proto/src/node.rs",
                shown(root, &b.file),
                b.line,
                b.name
            )
        })
        .collect())
}

/// `file` as the report names it: relative to the workspace root.
fn shown(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// The loop's rule (`loops.rs`), as report lines.
fn loop_breaches(root: &Path) -> Result<Vec<String>, String> {
    Ok(loops::breaches(root)?
        .into_iter()
        .map(|b| {
            format!(
                "{}:{}: drains a role with its own `poll_output` loop: use \
                 onepipe_proto::drive (crates/proto/src/drive.rs)",
                shown(root, &b.file),
                b.line
            )
        })
        .collect())
}

/// Every `.rs` file below `dir`, skipping build output.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn is_test_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
        || path
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "benches")
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The name of the function a line declares, if it declares one (`pub(crate) const fn x<T>(`).
fn declared_fn(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for prefix in [
            "pub ",
            "const ",
            "async ",
            "unsafe ",
            "default ",
            "extern \"C\" ",
        ] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        if rest.starts_with("pub(") {
            rest = rest.split_once(") ").map_or(rest, |(_, r)| r);
        }
        if rest == before {
            break;
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_string())
}

/// The functions of one `rustfmt`-formatted file, with their lengths and whether they are tests'.
fn functions_of(text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let test_line = test_lines(&lines);
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = declared_fn(line) else {
            continue;
        };
        let Some(end) = body_end(&lines, i) else {
            continue;
        };
        let test = test_line[i] || attributes_above(&lines, i).any(|a| a == "#[test]");
        out.push(Function {
            name,
            line: i + 1,
            lines: end - i + 1,
            test,
        });
    }
    out
}

/// Which lines sit inside a `#[cfg(test)]` item (a module, a function, an impl).
fn test_lines(lines: &[&str]) -> Vec<bool> {
    let mut test_line = vec![false; lines.len()];
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            if let Some((start, end)) = item_after(lines, i) {
                test_line[start..=end].iter_mut().for_each(|t| *t = true);
            }
        }
    }
    test_line
}

/// The attribute lines directly above line `i` (doc comments skipped).
fn attributes_above<'a>(lines: &'a [&'a str], i: usize) -> impl Iterator<Item = &'a str> + 'a {
    lines[..i]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("#[") || l.starts_with("///") || l.starts_with("//"))
        .filter(|l| l.starts_with("#["))
}

/// The first and last line of the item that an attribute on line `attr` applies to.
fn item_after(lines: &[&str], attr: usize) -> Option<(usize, usize)> {
    let start = (attr + 1..lines.len()).find(|&j| {
        let t = lines[j].trim();
        !(t.starts_with("#[") || t.starts_with("//") || t.is_empty())
    })?;
    if lines[start].trim_end().ends_with(';') {
        return Some((start, start)); // `mod tests;`, a `use`: the file-level rules cover the rest
    }
    body_end(lines, start).map(|end| (start, end))
}

/// The line that closes the braced item starting on line `start`: the first later line that is
/// the start's indentation and `}` (with `rustfmt`'s layout). `None` for a declaration (`fn
/// f();`). A one-line item ends on its own line.
fn body_end(lines: &[&str], start: usize) -> Option<usize> {
    let ind = indent(lines[start]);
    for (j, line) in lines.iter().enumerate().skip(start) {
        let t = line.trim_end();
        if j > start && indent(line) == ind && t.trim_start().starts_with('}') {
            return Some(j);
        }
        if j == start || indent(line) == ind {
            // Still in the signature: it ends with `{ ... }` on one line, `{`, or `;`.
            if t.ends_with('}') && t.contains('{') && balanced(t) {
                return Some(j);
            }
            if t.ends_with(';') && !t.contains('{') {
                return None;
            }
        }
    }
    None
}

fn balanced(line: &str) -> bool {
    line.matches('{').count() == line.matches('}').count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<(String, usize, usize, bool)> {
        functions_of(text)
            .into_iter()
            .map(|f| (f.name, f.line, f.lines, f.test))
            .collect()
    }

    #[test]
    fn measures_functions_as_rustfmt_lays_them_out() {
        let text = "\
pub(crate) fn one() {}
/// doc
fn two(
    a: u8,
) -> u8 {
    a
}
trait T {
    fn decl(&self);
    fn provided(&self) {
        let _ = 1;
    }
}
#[cfg(test)]
mod tests {
    fn helper() {
        let _ = 2;
    }
    #[test]
    fn t() {}
}
#[test]
fn loose() {
}
";
        assert_eq!(
            names(text),
            vec![
                ("one".into(), 1, 1, false),
                ("two".into(), 3, 5, false),
                ("provided".into(), 10, 3, false),
                ("helper".into(), 16, 3, true),
                ("t".into(), 20, 1, true),
                ("loose".into(), 23, 2, true),
            ]
        );
    }

    #[test]
    fn where_clauses_and_nested_items() {
        let text = "\
impl<T> X<T> {
    pub async fn go<F>(f: F)
    where
        F: Fn(),
    {
        fn inner() {
            let _ = 0;
        }
        f()
    }
}
";
        assert_eq!(
            names(text),
            vec![("go".into(), 2, 9, false), ("inner".into(), 6, 3, false)]
        );
    }

    #[test]
    fn test_files_by_path() {
        assert!(is_test_file(Path::new(
            "crates/proto/tests/scenarios/main.rs"
        )));
        assert!(is_test_file(Path::new("crates/proto/src/switch/tests.rs")));
        assert!(is_test_file(Path::new("crates/sim/benches/engine.rs")));
        assert!(!is_test_file(Path::new("crates/proto/src/switch.rs")));
    }
}
