//! The client's part of a Paxos process: it fills its window with requests to the leader it
//! believes in, takes replies and redirects, and sends again what went unanswered.

use super::*;

impl PaxosProcess {
    pub(super) fn fill_window(&mut self) {
        let c = &self.client;
        if !c.started || self.now >= self.cfg.repl.stop {
            return;
        }
        while (self.client.ops.len() as u32) < self.cfg.repl.window
            && self.client.next_id < self.acked() + CLIENT_ID_SPAN_MAX
        {
            let cmd = self.client.gen.next_cmd();
            let id = self.client.next_id;
            self.client.next_id += 1;
            let op = ClientOp {
                cmd,
                call: self.now,
                sent: self.now,
                redirects: 0,
            };
            self.client.ops.insert(id, op);
            self.send_request(id);
        }
    }

    /// The client's oldest operation in flight (every id below it completed).
    fn acked(&self) -> u64 {
        let c = &self.client;
        c.ops.keys().next().copied().unwrap_or(c.next_id)
    }

    fn send_request(&mut self, id: u64) {
        let acked = self.acked();
        let op = self.client.ops.get_mut(&id).expect("in flight");
        op.sent = self.now;
        let pad = if op.cmd.is_write() {
            self.cfg.repl.workload.value_size
        } else {
            0
        };
        let req = Request {
            client: self.me,
            id,
            acked,
            cmd: op.cmd,
            pad,
        };
        self.send(self.client.leader, Msg::Request(req));
    }

    pub(super) fn on_reply(&mut self, src: u32, id: u64, output: Option<Val>) {
        let Some(op) = self.client.ops.remove(&id) else {
            return; // A duplicate reply, or one to a resent request.
        };
        self.client.leader = src;
        self.client.leader_heard = self.now;
        self.client.gen.observe(&op.cmd, output);
        match op.cmd {
            Cmd::Get(_) => self.stats.gets += 1,
            Cmd::Put(..) => self.stats.puts += 1,
            Cmd::Cas { .. } => self.stats.cas += 1,
        }
        self.client.done.push_back(ReplDone {
            client: self.me,
            id,
            cmd: op.cmd,
            output,
            call_ns: op.call.as_nanos(),
            return_ns: self.now.as_nanos(),
        });
    }

    pub(super) fn on_redirect(&mut self, src: u32, id: u64, leader: Option<u32>) {
        let replicas = self.replicas();
        let Some(op) = self.client.ops.get_mut(&id) else {
            return;
        };
        // Two replicas that name each other would bounce a request forever: follow at most one
        // round of redirects per timeout.
        let Some(leader) = leader.filter(|&l| l < replicas && l != src) else {
            return;
        };
        if op.redirects >= replicas {
            return;
        }
        op.redirects += 1;
        self.client.leader = leader;
        self.stats.resent += 1;
        self.send_request(id);
    }

    /// Resends the operations nobody answered for `suspect_ns`; if the believed leader has been
    /// silent as long, to the next replica not known failed.
    pub(super) fn client_timeout(&mut self) {
        let suspect = self.cfg.repl.suspect_ns;
        let now = self.now;
        let expired: Vec<u64> = self
            .client
            .ops
            .iter()
            .filter(|(_, op)| op.sent + suspect <= now)
            .map(|(&id, _)| id)
            .collect();
        if expired.is_empty() {
            return;
        }
        if self.client.leader_heard + suspect <= now || self.failed[self.client.leader as usize] {
            self.next_leader_guess();
        }
        for id in expired {
            self.client.ops.get_mut(&id).expect("in flight").redirects = 0;
            self.stats.resent += 1;
            self.send_request(id);
        }
    }

    pub(super) fn next_leader_guess(&mut self) {
        let n = self.replicas();
        let c = &mut self.client;
        for k in 1..=n {
            let r = (c.leader + k) % n;
            if !self.failed[r as usize] || k == n {
                c.leader = r;
                break;
            }
        }
        c.leader_heard = self.now;
    }
}
