#!/usr/bin/env bash
# Planted bugs: each mutant below breaks one rule of 1Pipe in a copy of the tree; the test suite
# must fail for every one of them. Prints one line per mutant and exits non-zero if the suite
# missed any. Usage: scripts/planted-bugs.sh [mutant-name ...]
#        scripts/planted-bugs.sh --check   # only that every mutant's text is in the tree (seconds)
set -euo pipefail
root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=$(mktemp -d)
# The tree's own target dir: the dependencies the suite built are reused, and only the mutated
# crates rebuild. The mutated copy sits at one fixed path inside it, so a second run replaces the
# first's artifacts instead of adding to them. But the copy's workspace crates get the same
# artifact names and fingerprints as the tree's own (cargo leaves the path out of them), with
# dependency lists that name the copy's files: after a run, the tree's next build would take the
# last mutant's artifacts as up to date. So the workspace crates' fingerprints go at exit, and
# the tree's next build compiles its own crates again (not their dependencies).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$CARGO_TARGET_DIR" && CARGO_TARGET_DIR=$(cd "$CARGO_TARGET_DIR" && pwd)
tree="$CARGO_TARGET_DIR/planted-bugs-tree"
built=0
forget_mutants() {
  rm -rf "$work"
  if [ "$built" = 1 ]; then
    rm -rf "$CARGO_TARGET_DIR"/*/.fingerprint/onepipe-*
  fi
}
trap forget_mutants EXIT

# name @@ file @@ exact text @@ replacement @@ why the suite must catch it [@@ tests]
# `tests`: the cargo test commands (separated by ';') that must fail; by default the protocol
# crate's tests, then the simulator's. Mutants outside those crates name the tests that reach
# them: the runtime's, the live cluster's (`onepipe up` as separate processes), the stores'.
mutants=(
  "eq41-max@@crates/proto/src/switch.rs@@Some(m) if v > m => {}@@Some(m) if v < m => {}@@Eq. 4.1 takes the max of the input registers: barriers overtake messages in flight"
  "deliver-at-barrier@@crates/proto/src/reorder.rs@@if ts >= barrier {@@if ts > barrier {@@the receiver delivers a message whose timestamp equals the barrier"
  "no-late-drop@@crates/proto/src/host/receive.rs@@if self.barrier.is_some_and(|b| h.ts < b) {@@if false \&\& self.barrier.is_some_and(|b| h.ts < b) {@@late packets are buffered and delivered below a passed barrier"
  "beacon-too-high@@crates/proto/src/host/uplink.rs@@        latest_tick\n            .timestamp()\n@@        latest_tick\n            .timestamp().plus(self.interval_ns)\n@@hosts beacon a barrier one interval in the future"
  "no-loss-report@@crates/proto/src/host.rs@@        for e in lost {@@        for e in lost.into_iter().take(0) {@@senders never report messages whose acknowledgement timed out (§2.1)"
  "no-nak@@crates/proto/src/host/receive.rs@@let id = (from, to, psn);@@return; let id = (from, to, psn);@@late drops are never reported to the sender"
  "commit-before-acks@@crates/proto/src/reliable.rs@@match self.order.front() {\n            Some(&(ts, _, _)) => ts.min_wrapping(now_ts),@@match self.order.back() {\n            Some(\&(ts, _, _)) => ts.min_wrapping(now_ts),@@the commit barrier follows the newest unacknowledged message, not the oldest: commit before all ACKs are in (CommitBarrier-planted-bug.cfg)"
  "skip-discard@@crates/proto/src/host/recovery.rs@@rel.reorder.retain(|k| !gone(k.src, k.ts, f));@@rel.reorder.retain(|k| !gone(k.src, k.ts, f) || true);@@§5.2 Discard skipped: receivers deliver what a failed sender never committed"
  "skip-recall@@crates/proto/src/host/recovery.rs@@self.sender.fail(round, |d| f.contains_key(&d))@@self.sender.fail(round, |d| f.contains_key(\&d) \&\& false)@@§5.2 Recall skipped: scatterings a failed receiver never acknowledged stay and hold the commit barrier, or are delivered by some"
  "failure-ts-max@@crates/proto/src/failure.rs@@let Some(ts) = self.failure_ts(h, correct) else {@@let Some(ts) = self.failure_ts(h, correct).map(|t| t.plus(1_000_000)) else {@@§5.2 failure timestamp taken 1 ms above the neighbours' reported commit barriers: receivers commit messages the failed process may not have committed everywhere"
  "window-span@@crates/proto/src/reliable.rs@@self.used + frags <= self.window() && span <= WINDOW_MAX@@self.used + frags <= self.window() \&\& (span <= WINDOW_MAX || true)@@the reliable window counts packets in flight only: PSNs pass the receiver's SACK window above a hole (§5.1)"
  "discard-above-only@@crates/proto/src/host/recovery.rs@@f.get(&src).is_some_and(|&t| ts >= t)@@f.get(\&src).is_some_and(|\&t| ts > t)@@§5.2 Discard keeps the message stamped exactly the failure timestamp, which that commit barrier does not commit"
  "thaw-reported-commit@@crates/proto/src/switch.rs@@if k == COMMIT && self.inputs[port].commit_frozen {@@if k == COMMIT \&\& self.inputs[port].commit_frozen \&\& false {@@a link reported dead to the controller raises the commit barrier again when it speaks (§5.2)"
  "star-not-clique@@crates/proto/src/failure.rs@@let group = prune_to_clique(&stars[h], both);@@let group = stars[h].clone();@@§5.2 Determine counts as correct every host that reaches, both ways, one common host — not each other: Resume removes a link that was some correct sender's only path to a correct receiver"
  "no-isolation@@crates/proto/src/failure.rs@@if self.isolate_unseparated(now, &dead, &correct) {@@if false \&\& self.isolate_unseparated(now, \&dead, \&correct) {@@§5.2 a host declared failed while its commit barrier still reaches correct receivers gets a failure timestamp from reports that do not cut it off"
  "deliver-burst-unbounded@@crates/proto/src/host/receive.rs@@0 => u32::MAX,\n                n => n,@@_ => u32::MAX,@@a host delivers every released reliable message in one input: after a long §5.2 round its beacons starve past the link timeout and live hosts are declared failed"
  "rejoin-below-floor@@crates/proto/src/host/recovery.rs@@let counter = self.clock_ts.max_wrapping(floor);@@let counter = self.clock_ts.max_wrapping(floor.min(self.clock_ts));@@a rejoining host's new processes stamp below the switches' outputs: below barriers receivers have passed (§4.2 addition of links)"
  "rejoin-while-cut-off@@crates/proto/src/failure.rs@@keeps_everyone.then_some((revived, dead, failed))@@Some((revived, dead, failed))@@the controller admits a rejoining host that does not reach every correct host both ways (its uplink still silent)"
  "no-dup-discard@@crates/proto/src/host/receive.rs@@let duplicate = (remote@@let duplicate = false \&\& (remote@@receivers do not discard duplicate reliable packets (§5.1)"
  "be-ack-prompt@@crates/proto/src/host/receive.rs@@                self.cfg.ack_delay_be_ns@@                self.cfg.ack_delay_ns@@best-effort ACKs wait only the reliable delay: one ACK packet per message where a host pair is a process pair (§2.1, Fig. 8)"
  "retransmit-burst-unbounded@@crates/proto/src/reliable.rs@@let mut budget = if max == 0 { usize::MAX } else { max };@@let mut budget = usize::MAX;@@a host resends every due message in one input: an overloaded host's beacons starve past the link timeout and it is declared failed (VOPR seed 17)"
  "reliable-ack-not-pulled@@crates/proto/src/ack.rs@@            if due < p.due {@@            if false \&\& due < p.due {@@a reliable ACK joining a waiting best-effort batch waits the long best-effort delay and holds back the commit barrier (§5.1)"
  "agg-forwards-raw@@crates/runtime/src/aggregator.rs@@Some(&(Half::Up, p)) => self.up.handle(now, Input::Packet { port: p, packet }),@@Some(\&(Half::Up, p)) => { let raw = packet.clone(); self.up.handle(now, Input::Packet { port: p, packet }); self.pump(now); if matches!(raw, Packet::Data(_)) { if let Some(Output::Send { packet, .. }) = self.outputs.back_mut() { *packet = raw; } } }@@an aggregator daemon forwards a data packet as it came, before its register update reaches it: the sender's barrier goes on instead of the minimum over inputs (Eq. 4.1), so receivers pass barriers above packets still in flight@@cargo test -q -p onepipe-cli --test live up_runs_a_two_layer_cluster"
  "endpoint-delivers-on-arrival@@crates/runtime/src/endpoint.rs@@let role = if !cluster.ordered {@@let role = if true || !cluster.ordered {@@an endpoint delivers each message on arrival, with no barrier and no reorder buffer (§4.1)@@cargo test -q -p onepipe-cli --test live up_runs_a_two_layer_cluster"
  "coalescer-reorders@@crates/runtime/src/coalesce.rs@@        packet.encode(&mut p.bytes);@@        let mut first = Vec::new(); packet.encode(\&mut first); first.extend_from_slice(\&p.bytes); p.bytes = first;@@the coalescer puts each packet in front of those already waiting for the datagram: a beacon overtakes the data it follows@@cargo test -q -p onepipe-runtime --lib"
  "checker-backwards-barrier@@crates/sim/src/check.rs@@            Some(last) if barrier < last => {@@            Some(last) if barrier < last \&\& false => {@@the live checker's rule that a receiver's deliveries never carry a barrier lower than an earlier one is switched off@@cargo test -q -p onepipe-sim --lib check"
  "checker-causality-on-send@@crates/sim/src/check.rs@@            if ts <= d {@@            if ts < d {@@the checker lets a host stamp a send exactly at a timestamp it already delivered (§2.1 causality: it must stamp above)@@cargo test -q -p onepipe-sim --lib check"
  "callback-clock-at-queueing@@crates/proto/src/failure.rs@@if let Some(d) = r.deadlines.get_mut(&host) {@@if let Some(d) = r.deadlines.get_mut(\&host).filter(|_| false) {@@a held failure callback's clock runs from the Broadcast, not from when the application took the notification: an application that read its events late is declared failed (issue 35)@@cargo test -q -p onepipe-runtime --test failure the_callback_clock"
  "view-misses-departure@@crates/runtime/src/controller.rs@@.filter(|&h| bound(h) && !ctrl.is_failed(NodeId(h)))@@.filter(|\&h| bound(h))@@the controller's membership view keeps a process that left or failed: broadcasts to the view go to it, and the views say it is still there (issue 35)@@cargo test -q -p onepipe-runtime --test failure a_leave_is_one_left_event"
  "completed-before-callbacks@@crates/proto/src/host/rounds.rs@@            .filter(|r| !self.callbacks.contains(r))@@            .filter(|r| self.callbacks.contains(r) || true)@@a host reports a failure round Completed while the application's callbacks still run: Resume does not wait for them (§5.2)@@cargo test -q -p onepipe-proto --test scenarios;cargo test -q -p onepipe-runtime --test failure resume_waits"
  "room-ignored@@crates/proto/src/host/receive.rs@@if lp.reorder.len() >= self.cfg.reorder_len_max.min(lp.room) {@@if lp.reorder.len() >= self.cfg.reorder_len_max {@@a receiver accepts (and acknowledges) best-effort messages its application has no room for: they are lost without the sender hearing of it (§4.1)@@cargo test -q -p onepipe-proto --test scenarios;cargo test -q -p onepipe-runtime --test endpoint"
  "declared-not-frozen@@crates/runtime/src/endpoint/control_thread.rs@@shared.on_mgmt(Mgmt::Relay(RelayMsg::Failed { ts }));@@let _ = RelayMsg::Failed { ts };@@a live process the controller declared failed is not told: it goes on sending and delivering as if correct (§5.2 receiver recovery, VOPR seed 201)@@cargo test -q -p onepipe-cli --test live up_kill_a_process_and_its_tor"
  "forward-in-anothers-name@@crates/runtime/src/controller.rs@@(Member::Process(p), RelayMsg::Forward { from, .. }) => *from == NodeId(*p),@@(Member::Process(p), RelayMsg::Forward { from, .. }) => true || *from == NodeId(*p),@@the live controller relays packets a process forwards in another process's name (§5.2 forwarding: distrust the wire)@@cargo test -q -p onepipe-runtime --test failure control_lines"
  "relay-not-sent@@crates/runtime/src/endpoint.rs@@Mgmt::Relay(r) if to.is_none() => ToController::Relay {@@Mgmt::Relay(r) if to.is_none() \&\& false => ToController::Relay {@@a live endpoint never hands the controller what its black-holed path could not deliver (§5.2 controller forwarding): the pair's reliable messages never arrive@@cargo test -q -p onepipe-cli --test live up_black_holed"
  "tree-down-ports-swapped@@crates/runtime/src/failure.rs@@.chain(down.map(|(p, &l)| ((AggHalf::Down, p as u32), l)))@@.chain(down.map(|(p, \&l)| ((AggHalf::Down, 1 - p as u32), l)))@@a live aggregator names its down half's loopback as its parent's link and the reverse: its LinkDown reports name the wrong link and the controller cuts off the wrong hosts (§5.2 Determine)@@cargo test -q -p onepipe-runtime --lib failure"
  "rejoin-not-routed@@crates/runtime/src/aggregator.rs@@all &= r.alias(p, host);@@all \&= r.alias(p, p);@@the live aggregators never route a rejoined process's new id (§5.2 rejoin): what the others send it is dropped@@cargo test -q -p onepipe-cli --test live up_restart_a_killed"
  "restarted-as-correct@@crates/runtime/src/endpoint.rs@@} else if restarted {@@} else if restarted \&\& false {@@a restarted live endpoint (or one that joins a running cluster) starts as if nothing happened, under its failed id with its memory lost: it never recovers and never rejoins (§5.2 receiver recovery)@@cargo test -q -p onepipe-cli --test live up_restart_a_killed"
  "engine-links-not-serialized@@crates/sim/src/engine.rs@@        let start = t.max(l.busy_until);@@        let start = t;@@the simulator's links stop serializing: packets sent back to back overlap on the wire (every protocol runs on this engine, so every pinned trace moves)@@cargo test -q -p onepipe-cli --test pinned"
  "engine-busy-core-runs-at-once@@crates/sim/src/engine.rs@@        if c.pending.is_empty() && c.free <= t {@@        if c.pending.is_empty() {@@a busy simulated core starts its next input before it has finished the last: the CPU model that makes throughput saturate (§7.2) is gone@@cargo test -q -p onepipe-cli --test pinned"
  "nic-keepalive-off@@crates/sim/src/onepipe.rs@@        if !hs.keepalive_armed {@@        if false \&\& !hs.keepalive_armed {@@a simulated host's NIC sends no keep-alive while its core is busy: a hot server delivering one timestamp's burst past its link timeout is declared failed (§4.2, §7.1; bench fig14 c at 512 processes)@@cargo test -q -p onepipe-sim --test apps a_hot_server"
  "busy-host-deaf@@crates/sim/src/onepipe.rs@@            hs.host.uplink_heard();@@            let _ = \&hs;@@a busy simulated host counts its switch silent while the switch's packets wait in its queue: it reports its own link dead (§4.2; bench fig14 c at 512 processes, 16 operations: 112 hosts declared)@@cargo test -q -p onepipe-sim --test apps a_hot_server"
  "kv-write-out-of-order@@crates/apps/src/kv.rs@@                vs.push((at, v));@@                vs.insert(0, (at, v));@@a key-value server puts each write before the versions it has, not after: writes applied out of timestamp order (7.3.1)@@cargo test -q -p onepipe-apps --lib"
  "kv-read-before-barrier@@crates/apps/src/kv.rs@@        if self.server.released.is_some_and(|b| ts < b) {@@        if true || self.server.released.is_some_and(|b| ts < b) {@@a key-value server answers a read-only request as it arrives, before the commit barrier passed its timestamp: a write stamped below it may still be on its way (7.3.1)@@cargo test -q -p onepipe-apps --lib"
  "kv-ro-not-retried@@crates/apps/src/kv.rs@@            self.stats.ro_retries += 1;\n            self.send_txn(txn);@@            self.stats.ro_retries += 1;@@an initiator told its read-only request was lost does not send the transaction again: it never completes (2.1, 7.3.1)@@cargo test -q -p onepipe-apps --lib"
  "kv-refused-reply-dropped@@crates/apps/src/kv.rs@@                    self.server.deferred.push_back((at, dst, bytes));@@                    let _ = (at, dst, bytes);@@a key-value server drops a reply its host refused (full send queue): the transaction is applied but its initiator never hears, and others read its write (7.3.1; found by bench fig14 at 512 processes)@@cargo test -q -p onepipe-apps --lib"
  "farm-ro-unvalidated@@crates/apps/src/kv/farm.rs@@                if servers.len() == 1 {@@                if !servers.is_empty() {@@the FaRM baseline completes a read-only transaction over several servers in one round trip without validating its reads: a writer committing between two reads is half seen (7.3.1; the checker must catch what the paper's 1-RTT claim would allow)@@cargo test -q -p onepipe-apps --lib"
  "tpcc-replica-skips@@crates/apps/src/tpcc/onepipe.rs@@            let result = r.shard.execute(&req.input);@@            let skip = r.id == 0 \&\& self.cfg.me.0 >= layout.shards \&\& self.stats.parts_applied == 20;\n            let result = if skip { r.shard.clone().execute(\&req.input) } else { r.shard.execute(\&req.input) };@@a TPC-C replica skips one transaction it was delivered (answers as if it applied it): its shard diverges from its siblings and from the replay (7.3.2, clause 3.3.2)@@cargo test -q -p onepipe-apps --lib tpcc; cargo test -q -p onepipe-sim --test apps tpcc"
  "repl-replica-accepts-gap@@crates/apps/src/repl/onertt.rs@@        if seq > expected {@@        if seq > expected \&\& false {@@a 1-RTT replica appends an entry that leaves a gap in its client's sequence instead of rejecting it (2.2.2)@@cargo test -q -p onepipe-apps --lib repl::onertt"
  "repl-client-trusts-one-checksum@@crates/apps/src/repl/onertt.rs@@                if !members.iter().all(|m| w.acks.contains_key(m)) {@@                if w.acks.is_empty() {@@a 1-RTT client takes a write as replicated on the first replica's checksum, not on all of them agreeing (2.2.2)@@cargo test -q -p onepipe-apps --lib repl::onertt"
  "repl-recovery-keeps-divergent@@crates/apps/src/repl/onertt.rs@@        while Self::end(r) > value.keep {@@        while Self::end(r) > value.keep + value.entries.len() as u64 {@@a 1-RTT recovery truncates each replica after the decided entries' count, so a replica keeps entries of its own the decided log does not have (2.2.2)@@cargo test -q -p onepipe-apps --lib repl::onertt"
  "repl-entry-commit-ignored@@crates/apps/src/repl/onertt.rs@@        self.advance_commit(commit);@@        let _ = commit;@@a 1-RTT replica ignores the commit point an entry carries: reads wait, and entries stay uncommitted until a notice alone or a recovery (2.2.2, piggybacked commit)@@cargo test -q -p onepipe-apps --lib repl::onertt"
  "repl-commit-never-alone@@crates/apps/src/repl/onertt.rs@@        if c.commit <= c.commit_told {@@        if c.commit <= c.commit_told || true {@@a 1-RTT client sends its commit point only on entries: after a write, a read or the end of the run leaves the replicas waiting for a write that never comes (2.2.2)@@cargo test -q -p onepipe-apps --lib repl::onertt"
  "paxos-decides-without-majority@@crates/apps/src/repl/paxos.rs@@        self.cfg.repl.replicas as usize / 2 + 1@@        1@@a MultiPaxos leader decides an instance on its own acceptance, without a majority of Phase 2b answers@@cargo test -q -p onepipe-apps --lib repl::paxos"
  "paxos-phase1-first-value@@crates/apps/src/repl/paxos.rs@@            if b > best.0 {@@            if false \&\& b > best.0 {@@a new MultiPaxos leader proposes at each instance the first value its promises report (its own, often older), not the highest ballot's (Santos & Schiper §II-A, Phase 1)@@cargo test -q -p onepipe-apps --lib repl::paxos"
  "switch-demand-held-back@@crates/proto/src/switch.rs@@                let rising = b.demand && self.cfg.demand_hold_ns > 0 && self.demand_until <= now;@@                let rising = false;@@a switch passes demand on only when its barrier moves: an idle tree learns that someone waits a regular beacon interval late (issue 37, demand beacons)@@cargo test -q -p onepipe-proto --lib switch::tests::demand"
  "host-demand-echoed@@crates/proto/src/host.rs@@        let demand = self.local_need(now);\n        let news@@        let demand = self.wants_fast(now);\n        let news@@a host flags demand it was only told of: demand echoes between hosts and switches and fast beacons never stop (issue 37, demand beacons)@@cargo test -q -p onepipe-proto --test scenarios demand"
  "be-deliver-burst-unbounded@@crates/proto/src/host/receive.rs@@                if lp.room == 0 || cut {@@                if lp.room == 0 {@@a host delivers every best-effort message a barrier releases in one input: a hot server's burst keeps it from its beacons past the link timeout and it is declared failed (4.2; bench fig14 YCSB at 512 processes)@@cargo test -q -p onepipe-proto --test scenarios"
  "store-stale-fence@@crates/ctrlstore/src/mem.rs@@is_some_and(|h| h.fence == l.fence)@@is_some_and(|h| h.fence >= l.fence)@@the controller store accepts a deposed leader's fenced write: two controllers append to the §5.2 log@@cargo test -q -p onepipe-ctrlstore --lib"
  "auth-beacon-unchecked@@crates/runtime/src/auth.rs@@        verified.map_err(|_| AuthFailure::BadTag)?;@@        if segment.get(HEADER_LEN) != Some(\&2) { verified.map_err(|_| AuthFailure::BadTag)?; }@@the tag is not checked for one packet type: a datagram whose body starts with a beacon is accepted with any tag, so anyone can forge a barrier (docs/SECURITY.md)@@cargo test -q -p onepipe-runtime --lib auth::"
  "auth-window-before-tag@@crates/runtime/src/auth.rs@@        verified.map_err(|_| AuthFailure::BadTag)?;\n        // RFC 6479 / IPsec: the window moves only for a datagram whose tag verified.\n        k.window\n            .mark(header.counter)\n            .map_err(|_| AuthFailure::Replay)?;@@        k.window.mark(header.counter).map_err(|_| AuthFailure::Replay)?;\n        verified.map_err(|_| AuthFailure::BadTag)?;@@the replay window is updated before the tag is checked: a forger moves it, and the genuine datagram with that counter is refused as a replay (RFC 6479)@@cargo test -q -p onepipe-runtime --lib auth::"
  "auth-old-epoch-forever@@crates/runtime/src/auth.rs@@            .is_some_and(|(_, until)| *until <= now)@@            .is_some_and(|(_, until)| false \&\& *until <= now)@@the previous key epoch is accepted for ever after a switch: a removed member's keys keep opening datagrams (docs/SECURITY.md)@@cargo test -q -p onepipe-runtime --lib auth::"
  "agg-no-ingress-filter@@crates/runtime/src/aggregator.rs@@            if self.spoofed(*port, packet) {@@            if false \&\& self.spoofed(*port, packet) {@@an aggregator forwards packets whatever sender they name: a member speaks in another process's name (docs/SECURITY.md, BCP 38)@@cargo test -q -p onepipe-runtime --lib aggregator::"
  "seal-reversed@@crates/runtime/src/coalesce.rs@@        for d in self.queue.range_mut(from..) {@@        for d in self.queue.range_mut(from..).rev() {@@datagrams queued together are sealed newest first: a link's counters run backwards, and a long enough queue pushes genuine datagrams out of the receiver's replay window@@cargo test -q -p onepipe-runtime --lib coalesce::"
  "callbacks-always-held@@crates/runtime/src/endpoint.rs@@        host_cfg.callbacks_held = opts.failure_callbacks == FailureCallbacks::Held;@@        host_cfg.callbacks_held = true;@@failure notifications hold their round whatever the application asked: an endpoint that does not read its events holds everyone's reliable delivery and is declared failed (issue 35)@@cargo test -q -p onepipe-runtime --test failure an_endpoint_that_reads_no_events"
  "graph-no-realtime@@crates/apps/src/depgraph.rs@@    if opts.realtime {\n        let mut events@@    if false \&\& opts.realtime {\n        let mut events@@the dependency-graph checker adds no real-time edges: a read that returns a value overwritten before it was called passes the strict-serializability check (issue 36)@@cargo test -q -p onepipe-apps --lib depgraph"
  "graph-initial-read-orders-nothing@@crates/apps/src/depgraph.rs@@                None => Some(0),@@                None => None,@@the dependency-graph checker draws no anti-dependency from a read of the initial version to the key's writers: write skew passes (issue 36)@@cargo test -q -p onepipe-apps --lib depgraph"
  "replay-in-initiator-order@@crates/apps/src/kv/check.rs@@            (c.ts, c.client, c.txn)@@            (c.client, c.ts, c.txn)@@the store's checker is handed a wrong serialization order (by initiator, then timestamp): a correct run must fail it (issue 36)@@cargo test -q -p onepipe-sim --test apps transactions_on_a_rack"
  "tpcc-c-balance-sign@@crates/apps/src/tpcc/db.rs@@c.c_balance = c.c_balance.wrapping_sub(amount);@@c.c_balance = c.c_balance.wrapping_add(amount);@@Payment adds H_AMOUNT to C_BALANCE (TPC-C 2.5.2.2): the reference, not the implementation, must judge the profile (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "tpcc-s-quantity-refill-at-equality@@crates/apps/src/tpcc/db.rs@@self.s_quantity = if self.s_quantity >= q.saturating_add(10) {@@self.s_quantity = if self.s_quantity > q.saturating_add(10) {@@New-Order refills S_QUANTITY by 91 when exactly 10 would remain (TPC-C 2.4.2.2) (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "tpcc-w-ytd-not-incremented@@crates/apps/src/tpcc/db.rs@@w.w_ytd = w.w_ytd.wrapping_add(Cents::from(t.amount));@@w.w_ytd = w.w_ytd.wrapping_add(0);@@Payment leaves W_YTD (TPC-C 2.5.2.2; 3.3.2.1 and 3.3.2.8 must object) (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "tpcc-c-payment-cnt-not-incremented@@crates/apps/src/tpcc/db.rs@@c.c_payment_cnt = c.c_payment_cnt.wrapping_add(1);@@c.c_payment_cnt = c.c_payment_cnt.wrapping_add(0);@@Payment leaves C_PAYMENT_CNT, which no answer carries: only the final state shows it (TPC-C 2.5.2.2) (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "tpcc-check-condition-one-sided@@crates/apps/src/tpcc/check.rs@@        if left != right {\n            self.found.push@@        if left > right {\n            self.found.push@@the TPC-C checker's consistency conditions only see one direction of a difference (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "tpcc-check-result-field-one-sided@@crates/apps/src/tpcc/check.rs@@                if g != e {\n@@                if g != e \&\& g.is_none() {\n@@the TPC-C checker passes a result field that is present but wrong (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "tpcc-check-replica-rows-skipped@@crates/apps/src/tpcc/check.rs@@if let (n @ 1.., first) = r.diff(want) {@@if let (n @ 1.., first) = want.diff(want) {@@the TPC-C checker never compares a replica's rows with the reference's, and still counts them compared (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "tpcc-check-customer-conditions-skipped@@crates/apps/src/tpcc/check.rs@@        e.customers(state, initial);\n@@\n@@the TPC-C checker never evaluates 3.3.2.10, 3.3.2.12 and C_PAYMENT_CNT (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "tpcc-replay-order-by-initiator@@crates/apps/src/tpcc/check.rs@@order.sort_by_key(|&i| (all[i].key, all[i].client, all[i].seq, all[i].txn));@@order.sort_by_key(|\&i| (all[i].client, all[i].key, all[i].seq, all[i].txn));@@the TPC-C checker is handed a wrong serialization order (by initiator, then timestamp) (issue 36)@@cargo test -q -p onepipe-apps --lib tpcc"
  "kv-realtime-weakened@@crates/apps/src/kv/check.rs@@            while r < by_return.len() && all[by_return[r]].return_ns.saturating_add(skew_ns) < call@@            while r < by_return.len() \&\& all[by_return[r]].return_ns.saturating_add(skew_ns).saturating_add(1_000_000) < call@@the store's real-time check allows a millisecond more than the clocks' skew: a transaction serialized before one that returned before it was called passes (issue 36)@@cargo test -q -p onepipe-apps --lib kv::check"
  "occ-prepare-unvalidated@@crates/apps/src/tpcc/occ.rs@@        let validate = true;@@        let validate = false;@@an OCC primary prepares without validating the versions its execution read: lost updates, a history that is not serializable; the replay and the dependency-graph checker (133 anomalies on seed 4) both see it (7.3.2)@@cargo test -q -p onepipe-sim --test apps tpcc_baselines"
  "tpcc-history-next-o-id-not-advanced@@crates/apps/src/tpcc/history.rs@@(!p.rolled_back).then_some(o + 1)@@(!p.rolled_back).then_some(o)@@the TPC-C history says a New-Order wrote the D_NEXT_O_ID it read: the next one reads a value nobody wrote, and the history of a clean run must check clean@@cargo test -q -p onepipe-apps --lib tpcc"
)

check_only=0
if [ "${1:-}" = "--check" ]; then check_only=1; shift; fi
selected=("$@")
missed=0
copied=0
last_file=""
for m in "${mutants[@]}"; do
  name=${m%%@@*}; rest=${m#*@@}
  file=${rest%%@@*}; rest=${rest#*@@}
  from=${rest%%@@*}; rest=${rest#*@@}
  to=${rest%%@@*}; rest=${rest#*@@}
  why=${rest%%@@*}; tests=""
  [ "$why" != "$rest" ] && tests=${rest#*@@}
  if [ ${#selected[@]} -gt 0 ] && [[ ! " ${selected[*]} " =~ " $name " ]]; then continue; fi
  if [ "$check_only" = 1 ]; then
    FROM="$from" python3 - "$root/$file" "$name" <<'PY' || missed=$((missed + 1))
import os, sys
frm = os.environ["FROM"].replace("\\n", "\n")
if frm not in open(sys.argv[1]).read():
    sys.exit(f"mutant {sys.argv[2]}: text not found in {sys.argv[1]}: {frm!r} (the code moved: update the mutant)")
PY
    continue
  fi
  started=$SECONDS
  # The tree is copied once per run. After that only the last mutant's file is put back, with
  # a fresh modification time (never its old one: cargo would take the crate built with the
  # mutant for up to date), so each mutant rebuilds the crates it and the last one touched and
  # what depends on them — not every crate, as a fresh copy's new times made it.
  if [ "$copied" = 0 ]; then
    rm -rf "$tree" && mkdir -p "$tree"
    (cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar cf - 2>/dev/null) | tar xf - -C "$tree"
    copied=1
  elif [ -n "$last_file" ]; then
    cat "$root/$last_file" >"$tree/$last_file"
  fi
  last_file=$file
  built=1
  FROM="$from" TO="$to" python3 - "$tree/$file" <<'PY'
import os, sys
p = sys.argv[1]; s = open(p).read()
frm = os.environ["FROM"].replace("\\n", "\n"); to = os.environ["TO"].replace("\\n", "\n").replace("\\&", "&")
if frm not in s:
    sys.exit(f"mutant text not found in {p}: {frm!r}")
open(p, "w").write(s.replace(frm, to, 1))
PY
  # The protocol crate's own tests first: most mutants fail there, and the simulator's tests
  # (a longer build and run) are only built for those that pass them.
  [ -n "$tests" ] || tests="cargo test -q -p onepipe-proto; cargo test -q -p onepipe-sim"
  : >"$work/log"
  passed=1
  IFS=';' read -ra cmds <<<"$tests"
  # Each command is built first (`--no-run`): a mutant that does not compile, or a build that
  # fails for want of disk space, proves nothing about the tests, so it is reported as broken
  # (and fails the run), never as caught.
  broken=""
  # Where a mutant's time goes (issue 38: the suite's planted bugs are most of its time): the
  # rebuilds, and the tests that run.
  build_s=0
  run_s=0
  for cmd in "${cmds[@]}"; do
    phase_start=$SECONDS
    if ! (cd "$tree" && eval "$cmd --no-run" >>"$work/log" 2>&1); then
      broken=$(grep -m1 -E '^error|No space left' "$work/log" || echo "see the build log")
      break
    fi
    build_s=$((build_s + SECONDS - phase_start))
    phase_start=$SECONDS
    if ! (cd "$tree" && eval "$cmd" >>"$work/log" 2>&1); then
      run_s=$((run_s + SECONDS - phase_start))
      passed=0
      break
    fi
    run_s=$((run_s + SECONDS - phase_start))
  done
  if [ -n "$broken" ]; then
    echo "BROKEN  $name — the mutated tree does not build, so nothing was checked: $broken ($((SECONDS - started)) s)"
    tail -n 20 "$work/log" | sed 's/^/        /'
    missed=$((missed + 1))
  elif [ "$passed" = 1 ]; then
    echo "MISSED  $name — $why ($((SECONDS - started)) s)"
    missed=$((missed + 1))
  else
    failing=$(grep -E '^    [A-Za-z_0-9:]+$' "$work/log" | sed 's/^ *//' | sort -u | head -4 | tr '\n' ' ' || true)
    echo "caught  $name — $why; failing: ${failing:-see log} ($((SECONDS - started)) s: build ${build_s} s, tests ${run_s} s)"
  fi
done
# The control: with the last mutant put back, the copy is the tree again, and its protocol and
# simulator tests pass — so no mutant's build outlived its turn.
if [ "$check_only" = 0 ] && [ -n "$last_file" ]; then
  cat "$root/$last_file" >"$tree/$last_file"
  if ! (cd "$tree" && cargo test -q -p onepipe-proto --lib >"$work/log" 2>&1 && cargo test -q -p onepipe-sim --lib >>"$work/log" 2>&1); then
    echo "CONTROL the copy with every mutant put back fails its tests: a mutant's build outlived it"
    tail -n 20 "$work/log" | sed 's/^/        /'
    missed=$((missed + 1))
  fi
fi
[ "$missed" -eq 0 ]
