//! `planted`: runs the planted bugs of `scripts/planted-bugs.txt`. Each mutant changes one text
//! in one file of the tree itself — in place, so only the crates it touches and what links them
//! rebuild, incrementally, on the suite's own build — and runs its cheapest tests, which must
//! fail; then the file is put back. One line per mutant; exit 1 if the suite missed any (or a
//! mutated tree did not build: nothing was checked), 2 on a bad data file or usage.
//!
//! The file being mutated is saved first under `target/planted-bugs/` with a journal naming it:
//! a run that is killed leaves the journal, and the next run (or `--restore`) puts the file
//! back before anything else. `scripts/planted-bugs.sh` runs `--restore` on every exit.

#![forbid(unsafe_code)]
#![allow(clippy::disallowed_methods)] // a test runner: files, clocks and processes are its job

mod data;

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use data::Mutant;

const USAGE: &str = "\
planted: run the planted bugs; each must make its tests fail

usage: planted [--root DIR] [--data FILE] [--timeout SECS] [--check | --restore | --list] [NAME ...]

  --root DIR      the repository root (default: the current directory)
  --data FILE     the mutants (default: ROOT/scripts/planted-bugs.txt)
  --timeout SECS  the longest one test command may run (default 600); a command still
                  running then is stopped and the mutant counted caught, marked so
  --check         only check that every mutant's text occurs once in its file (seconds)
  --restore       only put back a file a killed run left mutated (see target/planted-bugs)
  --list          print the mutants' names and files
  NAME ...        run only these mutants

The tree is changed in place while a mutant runs: do not edit or build it meanwhile.";

struct Opts {
    root: PathBuf,
    data: Option<PathBuf>,
    timeout_s: u64,
    mode: Mode,
    names: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    Check,
    Restore,
    List,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        root: PathBuf::from("."),
        data: None,
        timeout_s: 600,
        mode: Mode::Run,
        names: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |flag: &str| args.next().ok_or(format!("{flag} wants a value"));
        match a.as_str() {
            "--root" => o.root = PathBuf::from(value("--root")?),
            "--data" => o.data = Some(PathBuf::from(value("--data")?)),
            "--timeout" => {
                let v = value("--timeout")?;
                o.timeout_s = v
                    .parse()
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or(format!("--timeout {v:?}: want whole seconds above 0"))?;
            }
            "--check" => o.mode = Mode::Check,
            "--restore" => o.mode = Mode::Restore,
            "--list" => o.mode = Mode::List,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ if a.starts_with('-') => return Err(format!("unknown flag {a:?}")),
            _ => o.names.push(a),
        }
    }
    Ok(o)
}

/// Where a run keeps its journal and logs: the target dir's `planted-bugs/`.
fn state_dir(root: &Path) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        root.join(target)
    };
    target.join("planted-bugs")
}

/// The saved original of the file being mutated, and the journal naming it.
struct Journal {
    dir: PathBuf,
}

impl Journal {
    fn journal(&self) -> PathBuf {
        self.dir.join("journal")
    }
    fn original(&self) -> PathBuf {
        self.dir.join("original")
    }

    /// Saves `rel`'s text before it is changed: the original first, then the journal, so a
    /// journal always names a complete original.
    fn save(&self, rel: &str, text: &str) -> Result<(), String> {
        fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        fs::write(self.original(), text).map_err(|e| format!("saving {rel}: {e}"))?;
        fs::write(self.journal(), rel).map_err(|e| format!("journal: {e}"))
    }

    /// Puts back the file a journal names (with a fresh modification time, so cargo rebuilds
    /// what was built from the mutant). Returns the file put back, if any.
    fn restore(&self, root: &Path) -> Result<Option<String>, String> {
        let Ok(rel) = fs::read_to_string(self.journal()) else {
            return Ok(None);
        };
        let text = fs::read_to_string(self.original())
            .map_err(|e| format!("the journal names {rel}, but its original is lost: {e}"))?;
        fs::write(root.join(&rel), text).map_err(|e| format!("putting back {rel}: {e}"))?;
        fs::remove_file(self.journal()).map_err(|e| format!("journal: {e}"))?;
        Ok(Some(rel))
    }
}

/// What one mutant's run came to.
enum Outcome {
    Caught {
        failing: Vec<String>,
        timed_out: bool,
    },
    Missed,
    Broken(String),
}

/// Runs `cmd` through `sh` from `root` with output appended to `log`, stopped (with every
/// process it started) after `timeout_s`. Returns (succeeded, timed out).
fn sh(root: &Path, cmd: &str, log: &Path, timeout_s: u64) -> Result<(bool, bool), String> {
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    // GNU timeout runs the command in its own process group and signals the whole group.
    let status = Command::new("timeout")
        .args(["-k", "10", &timeout_s.to_string(), "sh", "-c", cmd])
        .current_dir(root)
        // A mutant's failing proptest would otherwise leave a regressions file in the tree.
        .env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(|e| format!("running {cmd:?}: {e}"))?;
    Ok((
        status.success(),
        matches!(status.code(), Some(124) | Some(137)),
    ))
}

/// The text of `log` from byte `from` on (empty if it cannot be read).
fn read_from(log: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = fs::File::open(log) {
        let _ = f.seek(SeekFrom::Start(from));
        let _ = f.read_to_string(&mut text);
    }
    text
}

/// The last `n` lines of `log` (read from its last 64 KiB).
fn log_tail(log: &Path, n: usize) -> Vec<String> {
    let len = fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    let text = read_from(log, len.saturating_sub(64 * 1024));
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// The failing tests a libtest log lists (`failures:` then `    name` lines).
fn failing_tests(log: &Path) -> Vec<String> {
    let text = fs::read_to_string(log).unwrap_or_default();
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|n| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
        })
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Whether the log, from byte `from` on, shows a test harness that ran at least one test.
fn ran_a_test(log: &Path, from: u64) -> bool {
    read_from(log, from).lines().any(|l| {
        l.strip_prefix("running ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    })
}

/// Where a mutant's time went (summed exactly; rounded only when printed).
struct Timing {
    build: Duration,
    tests: Duration,
}

/// Runs one mutant's commands on the mutated tree: each is built first (`--no-run`), so a tree
/// that does not build is reported broken, never caught.
fn run_tests(root: &Path, m: &Mutant, log: &Path, timeout_s: u64, t: &mut Timing) -> Outcome {
    let _ = fs::write(log, "");
    for cmd in &m.tests {
        let started = Instant::now();
        let built = sh(root, &format!("{cmd} --no-run"), log, timeout_s);
        t.build += started.elapsed();
        match built {
            Err(e) => return Outcome::Broken(e),
            Ok((false, _)) => {
                let tail = log_tail(log, 20);
                let first = tail
                    .iter()
                    .find(|l| l.starts_with("error") || l.contains("No space left"))
                    .cloned()
                    .unwrap_or_else(|| "see the build log".into());
                return Outcome::Broken(format!("the mutated tree does not build: {first}"));
            }
            Ok((true, _)) => {}
        }
        let started = Instant::now();
        let from = fs::metadata(log).map(|m| m.len()).unwrap_or(0);
        let ran = sh(root, cmd, log, timeout_s);
        t.tests += started.elapsed();
        match ran {
            Err(e) => return Outcome::Broken(e),
            Ok((false, timed_out)) => {
                return Outcome::Caught {
                    failing: failing_tests(log),
                    timed_out,
                }
            }
            // A filter that matches nothing (a test renamed) passes: say so, not "missed".
            Ok((true, _)) if !ran_a_test(log, from) => {
                return Outcome::Broken(format!("`{cmd}` ran no test (was one renamed?)"));
            }
            Ok((true, _)) => {}
        }
    }
    Outcome::Missed
}

/// Mutates, runs, puts back. Returns whether the mutant was caught.
fn run_one(root: &Path, j: &Journal, m: &Mutant, timeout_s: u64) -> Result<bool, String> {
    let path = root.join(&m.file);
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", m.file))?;
    let mutated = data::apply(m, &text)?;
    let started = Instant::now();
    j.save(&m.file, &text)?;
    fs::write(&path, mutated).map_err(|e| format!("{}: {e}", m.file))?;
    let log = j.dir.join(format!("{}.log", m.name));
    let mut t = Timing {
        build: Duration::ZERO,
        tests: Duration::ZERO,
    };
    let outcome = run_tests(root, m, &log, timeout_s, &mut t);
    j.restore(root)?;
    let back = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", m.file))?;
    if back != text {
        return Err(format!("{} was not put back as it was", m.file));
    }
    let secs = |d: Duration| d.as_secs_f64().round();
    let times = format!(
        "{} s: build {} s, tests {} s",
        secs(started.elapsed()),
        secs(t.build),
        secs(t.tests)
    );
    Ok(match outcome {
        Outcome::Caught { failing, timed_out } => {
            let mut shown = failing
                .iter()
                .take(4)
                .cloned()
                .collect::<Vec<_>>()
                .join(" ");
            if failing.len() > 4 {
                shown += &format!(" (+{} more)", failing.len() - 4);
            }
            if shown.is_empty() {
                shown = format!("see {}", log.display());
            }
            let stopped = if timed_out {
                format!(", stopped after {timeout_s} s")
            } else {
                String::new()
            };
            println!(
                "caught  {} — {}; failing: {shown} ({times}{stopped})",
                m.name, m.why
            );
            true
        }
        Outcome::Missed => {
            println!("MISSED  {} — {} ({times})", m.name, m.why);
            false
        }
        Outcome::Broken(first) => {
            println!(
                "BROKEN  {} — nothing was checked: {first} ({times})",
                m.name
            );
            for l in log_tail(&log, 20) {
                println!("        {l}");
            }
            false
        }
    })
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("planted: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let j = Journal {
        dir: state_dir(&o.root),
    };
    match j.restore(&o.root) {
        Ok(Some(rel)) => eprintln!("planted: put back {rel}, which a killed run left mutated"),
        Ok(None) => {}
        Err(e) => {
            eprintln!("planted: {e}");
            return ExitCode::from(2);
        }
    }
    if o.mode == Mode::Restore {
        return ExitCode::SUCCESS;
    }
    let data_path = o
        .data
        .clone()
        .unwrap_or_else(|| o.root.join("scripts/planted-bugs.txt"));
    let mutants = match fs::read_to_string(&data_path)
        .map_err(|e| e.to_string())
        .and_then(|t| data::parse(&t).map_err(|e| e.to_string()))
    {
        Ok(m) => m,
        Err(e) => {
            eprintln!("planted: {}: {e}", data_path.display());
            return ExitCode::from(2);
        }
    };
    for n in &o.names {
        if !mutants.iter().any(|m| &m.name == n) {
            eprintln!("planted: no mutant named {n:?} in {}", data_path.display());
            return ExitCode::from(2);
        }
    }
    let chosen: Vec<&Mutant> = mutants
        .iter()
        .filter(|m| o.names.is_empty() || o.names.contains(&m.name))
        .collect();
    let mut bad = 0usize;
    for m in chosen {
        match o.mode {
            Mode::Restore => unreachable!("--restore returns before the mutants are read"),
            Mode::List => println!("{}\t{}", m.name, m.file),
            Mode::Check => {
                let text = fs::read_to_string(o.root.join(&m.file)).unwrap_or_default();
                if let Err(e) = data::apply(m, &text) {
                    eprintln!("{e}");
                    bad += 1;
                }
            }
            Mode::Run => match run_one(&o.root, &j, m, o.timeout_s) {
                Ok(true) => {}
                Ok(false) => bad += 1,
                Err(e) => {
                    eprintln!("planted: {e}");
                    let _ = j.restore(&o.root);
                    return ExitCode::from(2);
                }
            },
        }
    }
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
