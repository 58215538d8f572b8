//! The faults `onepipe up` injects while the workload runs (`--kill`, `--blackhole`, `--cut`,
//! `--pause`, `--restart`), each at its time after the start, and what follows a killed
//! controller.

use super::super::{Blackhole, KillTarget, Restart};
use super::{Abort, Role, Run};
use onepipe_runtime::clock::monotonic_ns;

impl Run<'_> {
    /// Fires the timed `--kill`s that are due.
    pub(super) fn fire_kills(&mut self) {
        if self.t0 == 0 {
            return;
        }
        let now = monotonic_ns();
        for k in 0..self.kills.len() {
            let due = self.kills[k]
                .kill
                .at_ns
                .is_some_and(|at| now >= self.t0 + at);
            if self.kills[k].fired.is_none() && due {
                self.fire(k);
            }
        }
        for k in 0..self.blackholes.len() {
            let (b, ordered) = self.blackholes[k];
            if !ordered && now >= self.t0 + b.at_ns {
                self.blackholes[k].1 = true;
                self.order_blackhole(b, now);
            }
        }
        for k in 0..self.cuts.len() {
            let (c, ordered) = self.cuts[k];
            if !ordered && now >= self.t0 + c.at_ns {
                self.cuts[k].1 = true;
                self.order_cut(c, now);
            }
        }
        for k in 0..self.pauses.len() {
            let (p, done) = self.pauses[k];
            let step = match done {
                0 if now >= self.t0 + p.from_ns => Some(rustix::process::Signal::STOP),
                1 if now >= self.t0 + p.to_ns => Some(rustix::process::Signal::CONT),
                _ => None,
            };
            if let Some(sig) = step {
                self.pauses[k].1 += 1;
                self.signal_node(p.proc, sig, now);
            }
        }
        for k in 0..self.restarts.len() {
            let (r, started) = self.restarts[k];
            if !started && now >= self.t0 + r.at_ns {
                self.restarts[k].1 = true;
                self.start_again(r, now);
            }
        }
    }

    /// `--restart proc:N`: a new endpoint process for pN, memory lost; `start` goes to it
    /// once it says `ready` (see `on_line`).
    fn start_again(&mut self, r: Restart, now: u64) {
        let mut argv = self.node_argv(r.proc);
        argv.push("--restarted".into());
        println!(
            "  restart     {r} at {:.2} s: p{} starts again, its memory lost",
            now.saturating_sub(self.t0) as f64 / 1e9,
            r.proc
        );
        if let Err(Abort::Failed(e)) = self.spawn(Role::Node(r.proc), &argv) {
            println!("  restart     {r}: {e}");
        }
    }

    /// `--blackhole A>B`: orders A's first-hop aggregator to black-hole A's packets to B.
    fn order_blackhole(&mut self, b: Blackhole, now: u64) {
        let line = format!("blackhole {} {}", b.from, b.to);
        let what = format!("p{}'s data, ACKs and NAKs to p{}", b.from, b.to);
        self.order_fault(b.from, &line, &format!("blackhole   {b}"), &what, now);
    }

    /// `--cut proc:N`: orders pN's first-hop aggregator to drop everything pN sends.
    fn order_cut(&mut self, c: Restart, now: u64) {
        let line = format!("cut {}", c.proc);
        let what = format!("everything p{} sends (its uplink, one direction)", c.proc);
        self.order_fault(c.proc, &line, &format!("cut         {c}"), &what, now);
    }

    /// Sends `sig` (`--pause`: SIGSTOP, then SIGCONT) to endpoint `proc`, and says so.
    fn signal_node(&mut self, proc: u32, sig: rustix::process::Signal, now: u64) {
        let Some(i) = self.roles.iter().position(|r| *r == Role::Node(proc)) else {
            return;
        };
        let pid = self.children[i].pid();
        let name = if sig == rustix::process::Signal::STOP {
            "SIGSTOP"
        } else {
            "SIGCONT"
        };
        let sent = rustix::process::Pid::from_raw(pid as i32)
            .map(|p| rustix::process::kill_process(p, sig));
        let how = match sent {
            Some(Ok(())) => String::new(),
            Some(Err(e)) => format!(" (failed: {e})"),
            None => " (no pid)".into(),
        };
        println!(
            "  pause       p{proc} at {:.2} s: {name} (pid {pid}){how}",
            now.saturating_sub(self.t0) as f64 / 1e9
        );
    }

    /// Writes test fault `line` to process `proc`'s first-hop aggregator and says so.
    fn order_fault(&mut self, proc: u32, line: &str, label: &str, what: &str, now: u64) {
        let Some(agg) = self.aggregator_of.get(proc as usize).cloned() else {
            return;
        };
        let role = Role::Aggregator(agg.clone());
        let Some(i) = self.roles.iter().position(|r| *r == role) else {
            return;
        };
        self.children[i].send(line);
        println!(
            "  {label} at {:.2} s: {agg} drops {what}",
            now.saturating_sub(self.t0) as f64 / 1e9
        );
    }

    /// Kill `k`: SIGKILL, and its victim's exit is expected from now on. `controller` is the
    /// leading one.
    pub(super) fn fire(&mut self, k: usize) {
        let now = monotonic_ns();
        let i = match &self.kills[k].kill.target {
            KillTarget::Proc(p) => self.roles.iter().position(|r| *r == Role::Node(*p)),
            KillTarget::Agg(name) => {
                let role = Role::Aggregator(name.clone());
                self.roles.iter().position(|r| *r == role)
            }
            KillTarget::Controller => self.leader.or(Some(0)),
        };
        let Some(i) = i else {
            return;
        };
        let pid = self.children[i].pid();
        self.children[i].kill();
        self.heard[i].gone = true;
        self.kills[k].fired = Some((now, pid));
        println!(
            "  kill        {} at {:.2} s: SIGKILL {} (pid {pid})",
            self.kills[k].kill,
            now.saturating_sub(self.t0) as f64 / 1e9,
            self.children[i].name
        );
        if matches!(self.roles[i], Role::Controller(_)) {
            self.on_controller_lost(i);
        }
    }

    /// Controller `i` is gone. With a standby (--etcd), it takes over once the dead leader's
    /// lease ends: it replays the §5.2 log and finishes any open round, and the members
    /// re-register with it. With none, the cluster runs on but a later failure cannot be
    /// repaired (its survivors stall).
    fn on_controller_lost(&mut self, i: usize) {
        if self.leader == Some(i) {
            self.leader = None;
        }
        let standby = (0..self.roles.len()).find(|&j| {
            matches!(self.roles[j], Role::Controller(_)) && !self.heard[j].gone && j != i
        });
        match standby {
            Some(j) => println!(
                "  controller  {} killed: standby {} takes over when its lease ends; the \
                 members re-register with it, the processes keep running",
                self.children[i].name, self.children[j].name
            ),
            None => println!(
                "  controller  killed: there is no standby controller, so failures from now on \
                 cannot be repaired (delivery would stall); the processes keep running"
            ),
        }
    }
}
