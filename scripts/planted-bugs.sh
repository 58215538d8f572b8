#!/usr/bin/env bash
# Planted bugs: each mutant below breaks one rule of 1Pipe in a copy of the tree; the test suite
# must fail for every one of them. Prints one line per mutant and exits non-zero if the suite
# missed any. Usage: scripts/planted-bugs.sh [mutant-name ...]
#        scripts/planted-bugs.sh --check   # only that every mutant's text is in the tree (seconds)
set -euo pipefail
root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The tree's own target dir: the dependencies the suite built are reused, and only the mutated
# crates rebuild. The mutated copy sits at one fixed path inside it, so its artifacts never
# replace the tree's own, and a second run replaces the first's instead of adding to them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$CARGO_TARGET_DIR" && CARGO_TARGET_DIR=$(cd "$CARGO_TARGET_DIR" && pwd)
tree="$CARGO_TARGET_DIR/planted-bugs-tree"

# name @@ file @@ exact text @@ replacement @@ why the suite must catch it
mutants=(
  "eq41-max@@crates/proto/src/switch.rs@@Some(m) if v > m => {}@@Some(m) if v < m => {}@@Eq. 4.1 takes the max of the input registers: barriers overtake messages in flight"
  "deliver-at-barrier@@crates/proto/src/reorder.rs@@if ts >= barrier {@@if ts > barrier {@@the receiver delivers a message whose timestamp equals the barrier"
  "no-late-drop@@crates/proto/src/host.rs@@if self.barrier.is_some_and(|b| h.ts < b) {@@if false \&\& self.barrier.is_some_and(|b| h.ts < b) {@@late packets are buffered and delivered below a passed barrier"
  "beacon-too-high@@crates/proto/src/host.rs@@let barrier = latest_tick\n            .timestamp()@@let barrier = latest_tick\n            .timestamp().plus(self.cfg.beacon_interval_ns)@@hosts beacon a barrier one interval in the future"
  "no-loss-report@@crates/proto/src/host.rs@@        for e in lost {@@        for e in lost.into_iter().take(0) {@@senders never report messages whose acknowledgement timed out (§2.1)"
  "no-nak@@crates/proto/src/host.rs@@let id = (from, to, psn);@@return; let id = (from, to, psn);@@late drops are never reported to the sender"
  "commit-before-acks@@crates/proto/src/reliable.rs@@match self.order.front() {\n            Some(&(ts, _, _)) => ts.min_wrapping(now_ts),@@match self.order.back() {\n            Some(\&(ts, _, _)) => ts.min_wrapping(now_ts),@@the commit barrier follows the newest unacknowledged message, not the oldest: commit before all ACKs are in (CommitBarrier-planted-bug.cfg)"
  "skip-discard@@crates/proto/src/host.rs@@rel.reorder.retain(|k| !gone(k.src, k.ts, f));@@rel.reorder.retain(|k| !gone(k.src, k.ts, f) || true);@@§5.2 Discard skipped: receivers deliver what a failed sender never committed"
  "skip-recall@@crates/proto/src/host.rs@@self.sender.fail(round, |d| f.contains_key(&d))@@self.sender.fail(round, |d| f.contains_key(\&d) \&\& false)@@§5.2 Recall skipped: scatterings a failed receiver never acknowledged stay and hold the commit barrier, or are delivered by some"
  "failure-ts-max@@crates/proto/src/failure.rs@@let Some(ts) = self.failure_ts(h, &correct) else {@@let Some(ts) = self.failure_ts(h, \&correct).map(|_| now.timestamp()) else {@@§5.2 failure timestamp taken as the newest timestamp the process could have used, not the neighbours' reported commit barriers"
  "window-span@@crates/proto/src/reliable.rs@@self.used + frags <= self.window() && span <= WINDOW_MAX@@self.used + frags <= self.window() \&\& (span <= WINDOW_MAX || true)@@the reliable window counts packets in flight only: PSNs pass the receiver's SACK window above a hole (§5.1)"
  "discard-above-only@@crates/proto/src/host.rs@@f.get(&src).is_some_and(|&t| ts >= t)@@f.get(\&src).is_some_and(|\&t| ts > t)@@§5.2 Discard keeps the message stamped exactly the failure timestamp, which that commit barrier does not commit"
  "thaw-reported-commit@@crates/proto/src/switch.rs@@if k == COMMIT && self.inputs[port].commit_frozen {@@if k == COMMIT \&\& self.inputs[port].commit_frozen \&\& false {@@a link reported dead to the controller raises the commit barrier again when it speaks (§5.2)"
  "star-not-clique@@crates/proto/src/failure.rs@@let group = prune_to_clique(&stars[h], both);@@let group = stars[h].clone();@@§5.2 Determine counts as correct every host that reaches, both ways, one common host — not each other: Resume removes a link that was some correct sender's only path to a correct receiver"
  "no-isolation@@crates/proto/src/failure.rs@@if self.isolate_unseparated(now, &dead, &correct) {@@if false \&\& self.isolate_unseparated(now, \&dead, \&correct) {@@§5.2 a host declared failed while its commit barrier still reaches correct receivers gets a failure timestamp from reports that do not cut it off"
  "deliver-burst-unbounded@@crates/proto/src/host.rs@@0 => u32::MAX,\n                n => n,@@_ => u32::MAX,@@a host delivers every released reliable message in one input: after a long §5.2 round its beacons starve past the link timeout and live hosts are declared failed"
  "rejoin-below-floor@@crates/proto/src/host.rs@@let counter = self.clock_ts.max_wrapping(floor);@@let counter = self.clock_ts.max_wrapping(floor.min(self.clock_ts));@@a rejoining host's new processes stamp below the switches' outputs: below barriers receivers have passed (§4.2 addition of links)"
  "rejoin-while-cut-off@@crates/proto/src/failure.rs@@if !keeps_everyone {@@if false \&\& !keeps_everyone {@@the controller admits a rejoining host that does not reach every correct host both ways (its uplink still silent)"
  "no-dup-discard@@crates/proto/src/host.rs@@let duplicate = (remote@@let duplicate = false \&\& (remote@@receivers do not discard duplicate reliable packets (§5.1)"
  "be-ack-prompt@@crates/proto/src/host.rs@@                self.cfg.ack_delay_be_ns@@                self.cfg.ack_delay_ns@@best-effort ACKs wait only the reliable delay: one ACK packet per message where a host pair is a process pair (§2.1, Fig. 8)"
  "retransmit-burst-unbounded@@crates/proto/src/reliable.rs@@let mut budget = if max == 0 { usize::MAX } else { max };@@let mut budget = usize::MAX;@@a host resends every due message in one input: an overloaded host's beacons starve past the link timeout and it is declared failed (VOPR seed 17)"
  "reliable-ack-not-pulled@@crates/proto/src/ack.rs@@            if due < p.due {@@            if false \&\& due < p.due {@@a reliable ACK joining a waiting best-effort batch waits the long best-effort delay and holds back the commit barrier (§5.1)"
)

check_only=0
if [ "${1:-}" = "--check" ]; then check_only=1; shift; fi
selected=("$@")
missed=0
for m in "${mutants[@]}"; do
  name=${m%%@@*}; rest=${m#*@@}
  file=${rest%%@@*}; rest=${rest#*@@}
  from=${rest%%@@*}; rest=${rest#*@@}
  to=${rest%%@@*}; why=${rest#*@@}
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
  rm -rf "$tree" && mkdir -p "$tree"
  (cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar cf - 2>/dev/null) | tar xf - -C "$tree"
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
  if (cd "$tree" && cargo test -q -p onepipe-proto >"$work/log" 2>&1 &&
      cargo test -q -p onepipe-sim >>"$work/log" 2>&1); then
    echo "MISSED  $name — $why"
    missed=$((missed + 1))
  else
    failing=$(grep -E '^    [A-Za-z_0-9:]+$' "$work/log" | sed 's/^ *//' | sort -u | head -4 | tr '\n' ' ' || true)
    echo "caught  $name — $why; failing: ${failing:-see log}"
  fi
done
[ "$missed" -eq 0 ]
