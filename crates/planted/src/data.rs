//! The planted bugs' data file (`scripts/planted-bugs.txt`): one record per mutant.
//!
//! ```text
//! # A comment: a line starting with '#', outside a record's text blocks.
//! == eq41-max
//! file: crates/proto/src/switch.rs
//! why: Eq. 4.1 takes the max of the input registers: barriers overtake messages in flight
//! test: cargo test -q -p onepipe-proto --lib
//! before: Some(m) if v > m => {}
//! after: Some(m) if v < m => {}
//! ```
//!
//! `before` and `after` take the rest of their line after `": "`, or, when the key stands alone,
//! the block of lines that follows, each written `| text` (`|` alone for an empty line) and
//! joined with newlines. `test` may repeat: the commands run in order until one fails.

use std::fmt;

/// One planted bug: replace `before` (which must occur exactly once in `file`) by `after`, and
/// some command in `tests` must fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutant {
    /// Unique, `[a-z0-9-]+`.
    pub name: String,
    /// Path from the repository root.
    pub file: String,
    /// The rule the mutant breaks, and why the suite must notice.
    pub why: String,
    /// The cheapest commands that must fail (a shell line each, run from the root).
    pub tests: Vec<String>,
    /// The exact text replaced.
    pub before: String,
    /// Its replacement.
    pub after: String,
    /// The record's first line in the data file (for errors).
    pub line: usize,
}

/// A data file that does not parse, with the line it failed on.
#[derive(Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

fn err<T>(line: usize, what: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        what: what.into(),
    })
}

/// A record being read.
#[derive(Default)]
struct Draft {
    name: String,
    line: usize,
    file: Option<String>,
    why: Option<String>,
    tests: Vec<String>,
    before: Option<String>,
    after: Option<String>,
}

impl Draft {
    fn finish(self) -> Result<Mutant, ParseError> {
        let missing = |what: &str| ParseError {
            line: self.line,
            what: format!("mutant {} has no `{what}`", self.name),
        };
        let m = Mutant {
            file: self.file.clone().ok_or_else(|| missing("file"))?,
            why: self.why.clone().ok_or_else(|| missing("why"))?,
            before: self.before.clone().ok_or_else(|| missing("before"))?,
            after: self.after.clone().ok_or_else(|| missing("after"))?,
            tests: self.tests,
            name: self.name,
            line: self.line,
        };
        if m.tests.is_empty() {
            return err(m.line, format!("mutant {} has no `test`", m.name));
        }
        if m.before.is_empty() || m.before == m.after {
            return err(
                m.line,
                format!("mutant {}: `before` is empty or equals `after`", m.name),
            );
        }
        Ok(m)
    }

    fn set(
        slot: &mut Option<String>,
        key: &str,
        value: String,
        line: usize,
    ) -> Result<(), ParseError> {
        if slot.replace(value).is_some() {
            return err(line, format!("`{key}` given twice"));
        }
        Ok(())
    }
}

/// Parses the whole data file.
pub fn parse(text: &str) -> Result<Vec<Mutant>, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<Mutant> = Vec::new();
    let mut draft: Option<Draft> = None;
    let mut i = 0;
    while i < lines.len() {
        let (n, l) = (i + 1, lines[i]);
        i += 1;
        if l.trim().is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(name) = l.strip_prefix("== ") {
            if let Some(d) = draft.take() {
                out.push(d.finish()?);
            }
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                return err(n, format!("bad mutant name {name:?} (want [a-z0-9-]+)"));
            }
            if out.iter().any(|m| m.name == name) {
                return err(n, format!("mutant {name} named twice"));
            }
            draft = Some(Draft {
                name: name.to_string(),
                line: n,
                ..Draft::default()
            });
            continue;
        }
        let Some(d) = draft.as_mut() else {
            return err(n, "text before the first `== name` line");
        };
        let (key, value) = match l.split_once(':') {
            Some((k, "")) => (k, None),
            Some((k, v)) => match v.strip_prefix(' ') {
                Some(v) => (k, Some(v.to_string())),
                None => return err(n, format!("want `{k}: value` (one space after the colon)")),
            },
            None => return err(n, format!("want `key: value`, got {l:?}")),
        };
        let value = match value {
            Some(v) => v,
            None => {
                let mut block = Vec::new();
                while i < lines.len() && lines[i].starts_with('|') {
                    let b = &lines[i][1..];
                    block.push(b.strip_prefix(' ').unwrap_or(b));
                    i += 1;
                }
                if block.is_empty() {
                    return err(n, format!("`{key}:` alone wants `| text` lines after it"));
                }
                block.join("\n")
            }
        };
        match key {
            "file" => Draft::set(&mut d.file, key, value, n)?,
            "why" => Draft::set(&mut d.why, key, value, n)?,
            "before" => Draft::set(&mut d.before, key, value, n)?,
            "after" => Draft::set(&mut d.after, key, value, n)?,
            "test" => d.tests.push(value),
            _ => {
                return err(
                    n,
                    format!("unknown key `{key}` (file, why, test, before, after)"),
                )
            }
        }
    }
    if let Some(d) = draft.take() {
        out.push(d.finish()?);
    }
    Ok(out)
}

/// Applies `m` to the file's text: `before` must occur exactly once.
pub fn apply(m: &Mutant, text: &str) -> Result<String, String> {
    match text.matches(m.before.as_str()).count() {
        1 => Ok(text.replacen(m.before.as_str(), &m.after, 1)),
        0 => Err(format!(
            "mutant {}: its text is not in {} (the code moved: update scripts/planted-bugs.txt line {}): {:?}",
            m.name, m.file, m.line, m.before
        )),
        k => Err(format!(
            "mutant {}: its text occurs {k} times in {} (make it unique, line {})",
            m.name, m.file, m.line
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "# planted\n\
        == a-b\n\
        file: x.rs\n\
        why: because\n\
        test: cargo test -p x\n\
        test: cargo test -p y\n\
        before: if a > b {\n\
        after: if a < b {\n\
        \n\
        == c\n\
        file: y.rs\n\
        why: w\n\
        test: t\n\
        before:\n\
        |     one\n\
        |\n\
        |   two\n\
        after:\n\
        | x\n";

    #[test]
    fn records_inline_and_block_values_and_repeated_tests() {
        let ms = parse(TWO).unwrap();
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].name, "a-b");
        assert_eq!(ms[0].tests, ["cargo test -p x", "cargo test -p y"]);
        assert_eq!(ms[0].before, "if a > b {");
        assert_eq!(ms[0].line, 2);
        assert_eq!(ms[1].before, "    one\n\n  two");
        assert_eq!(ms[1].after, "x");
    }

    #[test]
    fn bad_files_name_the_line() {
        let cases = [
            ("file: x\n", 1, "before the first"),
            ("== A\n", 1, "bad mutant name"),
            (
                "== a\nfile: x\nwhy: w\ntest: t\nbefore: b\n",
                1,
                "no `after`",
            ),
            (
                "== a\nfile: x\nwhy: w\nbefore: b\nafter: c\n",
                1,
                "no `test`",
            ),
            ("== a\nfile: x\nfile: y\n", 3, "twice"),
            ("== a\nfiles: x\n", 2, "unknown key"),
            ("== a\nfile:x\n", 2, "one space"),
            ("== a\nbefore:\nafter: x\n", 2, "alone"),
            (
                "== a\nfile: x\nwhy: w\ntest: t\nbefore: b\nafter: b\n",
                1,
                "equals",
            ),
            (
                "== a\nfile: x\nwhy: w\ntest: t\nbefore: b\nafter: c\n== a\n",
                7,
                "named twice",
            ),
        ];
        for (text, line, what) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.what.contains(what), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_mutant_applies_only_to_text_it_finds_once() {
        let m = &parse(TWO).unwrap()[0];
        assert_eq!(apply(m, "x; if a > b { y }").unwrap(), "x; if a < b { y }");
        assert!(apply(m, "nothing").unwrap_err().contains("not in x.rs"));
        assert!(apply(m, "if a > b {if a > b {")
            .unwrap_err()
            .contains("2 times"));
    }
}
