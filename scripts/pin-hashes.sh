#!/usr/bin/env bash
# Pins the simulator's behaviour for a refactor (STYLE: "refactor in one step with the behaviour
# pinned"): prints the trace hash of the Fig. 9a command and of eleven §5.2 failure scenarios
# (crash, restart, heal, one-direction cut, blackhole, controller outage, best effort, ToR cut,
# rack and leaf-spine rejoin, skew), of every baseline protocol and of each application on each
# of its systems, one line each, and the violations of each. Run it before and
# after a change and diff; `--check` diffs against scripts/pin-hashes.expected (exit 1 if any
# line changed — then the change altered behaviour, and the commit must say why).
# Needs a release build: cargo build --release -p onepipe-cli (B=path to use another binary).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-./target/release/onepipe}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hash_of() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["trace_hash"], d.get("violations", ""))' "$1"
}
pins() {
  $B sim --topology fat-tree --k 4 --procs-per-host 1 --switch chip --beacon-interval 3us \
    --clock-skew 0.3us --workload all-to-all --rate 10000 --duration 5ms --seed 1 \
    --json "$tmp/a.json" >/dev/null
  echo "$(hash_of "$tmp/a.json") :: fig9a"
  local common="--topology fat-tree --k 4 --procs-per-host 1 --workload all-to-all --rate 20000 --duration 3ms --seed 7"
  run() {
    # shellcheck disable=SC2086
    $B sim $common "$@" --json "$tmp/o.json" >/dev/null 2>&1
    echo "$(hash_of "$tmp/o.json") :: $*"
  }
  run --service reliable --crash-host 3@1ms
  run --service reliable --crash-host 3@500us --restart-host 3@1500us
  run --service reliable --cut host-5@1ms..2ms
  run --service reliable --cut 'agg-3>tor-3@1ms'
  run --service reliable --blackhole '3>12@1ms'
  run --service reliable --crash-host 2@1ms --controller-down 1001us..1200us
  run --service be --crash-host 3@1ms
  run --service reliable --cut tor-1@1ms
  common="--workload all-to-all --rate 20000 --duration 3ms --seed 9"
  run --service reliable --crash-host 3@500us --restart-host 3@1500us --procs-per-host 2 --topology rack --hosts 8
  run --service reliable --cut host-2@500us..1500us --topology leaf-spine --hosts 8 --spines 2
  run --service reliable --cut host-2@500us..1500us --crash-host 5@700us --topology leaf-spine --hosts 8 --spines 2 --clock-skew 1us
  # The baselines, on the same engine: each protocol, fault-free and with loss, reordering and
  # duplication.
  common="--topology fat-tree --k 4 --procs-per-host 2 --workload all-to-all --rate 20000 --duration 2ms --seed 5"
  for p in sequencer sequencer-switch token lamport isis; do
    run --protocol $p
    run --protocol $p --loss 0.01 --reorder-prob 0.05 --dup 0.01
  done
  common="--topology leaf-spine --hosts 8 --spines 2 --procs-per-host 4 --workload scatter --scatter-k 3 --rate 50000 --duration 2ms --seed 3"
  run --protocol sequencer
  run --protocol lamport --clock-skew 1us
  # PLATO and ToTo (with all-ack), fault-free and with loss.
  common="--topology leaf-spine --hosts 8 --spines 2 --procs-per-host 1 --workload all-to-all --rate 20000 --duration 2ms --seed 4"
  for p in plato toto allack; do
    run --protocol $p
    run --protocol $p --loss 0.01
  done
  # The applications (docs/APPS.md) on 1Pipe and on each of their baselines, and with faults
  # (TPC-C on a small database and a short run: the suite runs these on its debug build).
  common="--topology fat-tree --k 4 --procs-per-host 2 --duration 1ms --seed 3"
  run --app kv --system 1pipe
  run --app kv --system farm
  run --app kv --system nontx
  run --app replkv --system 1pipe
  run --app replkv --system chain
  run --app replkv --system paxos
  run --app hashtable --system 1pipe
  run --app hashtable --system rdma
  run --app kv --system 1pipe --loss 0.01
  run --app kv --system farm --loss 0.01
  run --app replkv --system 1pipe --crash-host 2@300us
  common="--topology fat-tree --k 4 --procs-per-host 2 --duration 500us --seed 3 --items 1000 --customers 100"
  run --app tpcc --system 1pipe
  run --app tpcc --system 2pl
  run --app tpcc --system occ
  run --app tpcc --system 1pipe --crash-host 1@250us
}
if [ "${1:-}" = "--check" ]; then
  pins > "$tmp/now"
  diff scripts/pin-hashes.expected "$tmp/now"
else
  pins
fi
