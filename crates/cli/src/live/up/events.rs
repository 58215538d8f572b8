//! What `onepipe up` hears from its children: each line a child prints (`listening`, `ready`,
//! `sent`, `done`, `stats`), and the `event` lines of the controllers (leadership, §5.2
//! rounds) and of the endpoints (callbacks, rejoins), said once each.

use super::super::supervise::ChildLine;
use super::{Role, Run};
use onepipe_runtime::clock::monotonic_ns;

impl Run<'_> {
    pub(super) fn on_line(&mut self, line: ChildLine) {
        let (i, text) = match line {
            ChildLine::Closed(i) => {
                self.heard[i].closed = true;
                return;
            }
            ChildLine::Line(i, t) => (i, t),
        };
        let mut words = text.split_whitespace();
        let h = &mut self.heard[i];
        match (words.next(), &self.roles[i]) {
            (Some("listening"), Role::Controller(_)) => {
                h.addr = words.next().map(str::to_string);
                // Without an election a controller leads from the start.
                h.leads |= self.etcd.is_none();
            }
            (Some("ready"), Role::Aggregator(_)) => h.addr = words.next().map(str::to_string),
            (Some("ready"), Role::Node(_)) => {
                h.addr = words.nth(1).map(str::to_string);
                // A restarted endpoint (`--restart`) joins a run already going.
                if self.t0 != 0 {
                    let t0 = self.t0;
                    self.children[i].send(&format!("start {t0}"));
                }
            }
            (Some("sent"), Role::Node(_)) => {
                let v: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
                if let [ts, n] = v[..] {
                    h.sent = Some((ts, n));
                }
            }
            (Some("done"), Role::Node(_)) => h.done = Some(words.next() == Some("true")),
            (Some("stats"), _) => {
                let json = text.trim_start_matches("stats").trim();
                h.stats = serde_json::from_str(json).ok();
            }
            (Some("event"), role) => {
                let role = role.clone();
                let rest: Vec<&str> = words.collect();
                self.on_event(i, &role, &rest);
            }
            _ => println!("  {}: {text}", self.children[i].name),
        }
    }

    /// An `event` line from child `i`.
    fn on_event(&mut self, i: usize, role: &Role, rest: &[&str]) {
        let name = self.children[i].name.clone();
        match (role, rest) {
            // Processes leaving when told to stop are timed out like failed ones: not news.
            (Role::Controller(_), ["declared" | "resumed" | "leader" | "detected", ..])
                if self.stopping => {}
            (Role::Controller(_), ["leader", who]) => self.on_leader(i, &name, who),
            (Role::Controller(_), ["detected", _]) => self.on_detected(i),
            (Role::Controller(_), ["deposed", why @ ..]) => {
                println!("  {name}  deposed: {}", why.join(" "));
            }
            (Role::Controller(_), ["declared", round, failed @ ..]) => {
                self.on_declared(&name, round, failed)
            }
            (Role::Controller(_), ["resumed", round]) => {
                let round: u32 = round.parse().unwrap_or(0);
                if let Some((_, by @ None)) = self.rounds.get_mut(&round) {
                    *by = Some(name.clone());
                    println!("  {name}  round {round}: every correct process completed; resumed");
                }
            }
            (Role::Node(slot), ["rejoined-as", new]) => {
                if let Ok(new) = new.parse::<u32>() {
                    self.rejoined.insert(*slot, new);
                    let at = monotonic_ns().saturating_sub(self.t0) as f64 / 1e9;
                    println!("  {name}  rejoined as p{new} at {at:.2} s (§5.2: a new process)");
                }
            }
            // Every survivor hears of a rejoin: said once, by the rejoined process above.
            (_, ["rejoined", ..]) => {}
            (Role::Node(_), ["controller-changed"]) => {
                if self.said.insert(format!("{name} rejoined")) {
                    println!("  {name}: re-registered with the leading controller");
                }
            }
            // Every survivor hears the same news: say each once.
            (_, ["process-failed", p, "lost"]) => {
                if self.said.insert(format!("{p} lost")) {
                    println!("  {name}: the controller reports p{p} lost")
                }
            }
            (_, ["process-failed", p, how @ ("failed" | "left"), ts]) => {
                if let Ok(t) = ts.parse::<u64>() {
                    let told = self.callbacks.entry(format!("p{p}")).or_default();
                    told.insert(name.clone(), t);
                }
                if self.said.insert(format!("{p} failed")) {
                    println!("  {name}: p{p} {how} at ts {ts} (§5.2 callback)");
                }
            }
            (_, ["aggregator-failed", agg]) => {
                if self.said.insert(format!("{agg} failed")) {
                    println!("  {name}: the controller reports {agg} lost");
                }
            }
            (_, ["process-failed", _, "declared", _]) => {
                println!("  {name}: told it was declared failed (cut off from the others)")
            }
            _ => println!("  {name}: {}", rest.join(" ")),
        }
    }

    /// Controller `i` (`name`) says it leads, as `who`; a leader after the first took over.
    fn on_leader(&mut self, i: usize, name: &str, who: &str) {
        self.heard[i].leads = true;
        self.leader = Some(i);
        let again = if self.leaders.is_empty() {
            ""
        } else {
            " (took over: replayed the §5.2 log)"
        };
        self.leaders.push(who.to_string());
        println!("  {name}  leads{again}");
    }

    /// Controller `i` logged a Detect report: if it leads, the `--kill`s timed by a round
    /// (no `@TIME`) fire now.
    fn on_detected(&mut self, i: usize) {
        if self.leader == Some(i) {
            // The middle of a round: a Detect report is logged, Resume is to come.
            for k in 0..self.kills.len() {
                if self.kills[k].fired.is_none() && self.kills[k].kill.at_ns.is_none() {
                    self.fire(k);
                }
            }
        }
    }

    /// §5.2: controller `name` declared `failed` (`proc:ts` each) in `round`; the first
    /// controller to declare a round is the one heard.
    fn on_declared(&mut self, name: &str, round: &str, failed: &[&str]) {
        let round: u32 = round.parse().unwrap_or(0);
        if let Some((by, _)) = self.rounds.get(&round) {
            if *by != name {
                println!("  {name}  round {round}: declared again after the takeover");
            }
            return;
        }
        self.rounds.insert(round, (name.to_string(), None));
        let now = monotonic_ns();
        let mut said = Vec::new();
        for f in failed {
            let Some((p, ts)) = f.split_once(':') else {
                continue;
            };
            let (Ok(p), Ok(ts)) = (p.parse::<u32>(), ts.parse::<u64>()) else {
                continue;
            };
            self.declared.entry(p).or_insert((round, ts, now));
            if let Some(j) = self.roles.iter().position(|r| *r == Role::Node(p)) {
                self.heard[j].gone = true;
                self.heard[j].declared = true;
            }
            said.push(format!("p{p} (failure ts {ts})"));
        }
        println!(
            "  {name}  round {round}: declared failed {}",
            said.join(", ")
        );
    }
}
