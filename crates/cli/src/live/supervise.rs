//! Process plumbing for the live cluster: how a daemon learns to stop (Ctrl-C, SIGTERM, and —
//! when `onepipe up` started it — its standard input closing or its parent dying), and how `up`
//! owns its children so that none outlives it.
//!
//! A supervised child asks the kernel for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`) and
//! treats the end of its standard input as an order to stop: if `up` crashes or is killed, its
//! pipes close and every child stops by itself. `up` starts each child in a process group of
//! its own, so a Ctrl-C at the terminal reaches `up` alone, which then stops the children in
//! order; a [`Child`] dropped while still running is killed and reaped.

use std::io::{self, BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sets up stopping: the returned flag turns true on SIGINT or SIGTERM, and for a supervised
/// daemon also when standard input closes (its lines go to the returned receiver) or the parent
/// dies (SIGKILL, by the kernel).
pub fn install(supervised: bool) -> (Arc<AtomicBool>, Option<Receiver<String>>) {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registration fails only for forbidden signals; these two are not.
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    if !supervised {
        return (stop, None);
    }
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // The parent may have died before the request took effect: then we were re-parented.
    if rustix::process::getppid().is_none_or(|p| p.as_raw_nonzero().get() == 1) {
        stop.store(true, Ordering::SeqCst);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let flag = stop.clone();
    let spawned = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let stdin = io::stdin();
            for line in stdin.lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
            flag.store(true, Ordering::SeqCst);
        });
    if spawned.is_err() {
        stop.store(true, Ordering::SeqCst);
    }
    (stop, Some(rx))
}

/// What a child's reader thread reports.
#[derive(Debug)]
pub enum ChildLine {
    /// A line of its standard output.
    Line(usize, String),
    /// Its standard output closed.
    Closed(usize),
}

/// A child process `up` owns: its standard input to talk to it, its standard output read by a
/// thread into a shared channel. Killed and reaped if dropped while running.
pub struct Child {
    pub name: String,
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    status: Option<ExitStatus>,
}

impl Child {
    /// Starts `cmd` in a process group of its own, with piped standard input and output;
    /// output lines go to `lines` tagged with `index`.
    pub fn spawn(
        name: &str,
        mut cmd: Command,
        index: usize,
        lines: Sender<ChildLine>,
    ) -> io::Result<Child> {
        use std::os::unix::process::CommandExt;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take();
        std::thread::Builder::new()
            .name(format!("{name}-stdout"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if lines.send(ChildLine::Line(index, line)).is_err() {
                        return;
                    }
                }
                let _ = lines.send(ChildLine::Closed(index));
            })?;
        Ok(Child {
            name: name.to_string(),
            child,
            stdin,
            status: None,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one line to its standard input (ignored if it is gone).
    pub fn send(&mut self, line: &str) {
        if let Some(s) = self.stdin.as_mut() {
            if writeln!(s, "{line}").and_then(|_| s.flush()).is_err() {
                self.stdin = None;
            }
        }
    }

    /// Kills it with SIGKILL (`onepipe up --kill`); it is reaped by [`Child::exited`].
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
        }
        self.stdin = None;
    }

    /// Closes its standard input: a supervised child stops.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `timeout` for it to exit; kills it if it has not. Returns its status and
    /// whether it had to be killed.
    pub fn finish(&mut self, timeout: Duration) -> (Option<ExitStatus>, bool) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(s) = self.exited() {
                return (Some(s), false);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
        (self.status, true)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.stdin = None;
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Describes an exit status: `exit 0`, `exit 3`, `killed by signal 9`.
pub fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "ended".into(),
    }
}
