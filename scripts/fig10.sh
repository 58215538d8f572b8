#!/usr/bin/env bash
# Fig. 10 in the simulator: barrier-stall (recovery) time of reliable 1Pipe by failure type.
# Usage: scripts/fig10.sh [OUT.csv] [SEEDS]   (default docs/fig10.csv, 5 seeds)
# Each run: k=4 fat tree, 2 processes per host, all-to-all reliable traffic at 20k scatterings/s
# per process, 3 µs beacons, the failure at 1 ms; the stall is the longest time a correct host's
# commit barrier (and best-effort barrier) did not move after the failure, averaged over the
# correct hosts (the paper: "the average time of barrier timestamp stall for correct processes").
set -euo pipefail
root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
out=${1:-$root/docs/fig10.csv}
seeds=${2:-5}
bin=${ONEPIPE:-$root/target/release/onepipe}
[ -x "$bin" ] || (cd "$root" && cargo build -q --release -p onepipe-cli)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "failure,seed,stall_us_commit,stall_us_be,hosts_failed,recalled,violations" > "$out"
for kind in core-link host-link host tor; do
  case $kind in
    core-link) fault=(--cut agg-0/core-0@1ms) ;;
    host-link) fault=(--cut host-5@1ms) ;;
    host)      fault=(--crash-host 5@1ms) ;;
    tor)       fault=(--cut tor-2@1ms) ;;
  esac
  for seed in $(seq 1 "$seeds"); do
    "$bin" sim --topology fat-tree --k 4 --procs-per-host 2 --service reliable \
      --workload all-to-all --rate 20000 --duration 3ms --seed "$seed" "${fault[@]}" \
      --json "$tmp/r.json" >/dev/null
    python3 - "$tmp/r.json" "$kind" "$seed" >> "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
hosts = sum(len(f["hosts"]) for f in r["failure_rounds"])
print(f'{sys.argv[2]},{sys.argv[3]},{r["stall_ns_reliable"]/1e3:.2f},{r["stall_ns_be"]/1e3:.2f},{hosts},{r["recalled"]},{r["violations"]}')
PY
  done
done
python3 - "$out" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for kind in ["core-link", "host-link", "host", "tor"]:
    c = [float(r["stall_us_commit"]) for r in rows if r["failure"] == kind]
    b = [float(r["stall_us_be"]) for r in rows if r["failure"] == kind]
    print(f"{kind:10} commit stall mean {sum(c)/len(c):7.2f} us (min {min(c):.2f}, max {max(c):.2f}); best effort {sum(b)/len(b):.2f} us")
PY
