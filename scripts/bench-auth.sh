#!/usr/bin/env bash
# The cost of authentication (docs/BENCHMARKS.md, "Authenticated datagrams"): `onepipe up` at
# saturation with --auth on, encrypt and off, alternating run by run so a shared machine's
# changing load falls on all alike; one CSV line per run on standard output, and the medians
# per point on standard error. Not a test: it takes minutes and measures this machine.
#
#   scripts/bench-auth.sh > auth.csv                    # 1 KB × 3 endpoints and 64 B × 4, 5 runs each
#   POINTS="64:4" REPEAT=3 scripts/bench-auth.sh        # one point
#   MODES="on off" scripts/bench-auth.sh                # leave out encrypt
#   POINTS="64:4" RATE=2000 MODES=on EXTRA="--rotate-keys-every 100ms" scripts/bench-auth.sh
#                                                       # light load, keys rotating: delivery gaps
#
# Needs a release build (cargo build --release -p onepipe-cli) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./target/release/onepipe
POINTS=${POINTS:-"1024:3 64:4"}
MODES=${MODES:-"on encrypt off"}
REPEAT=${REPEAT:-5}
DURATION=${DURATION:-3s}
RATE=${RATE:-1000000}
EXTRA=${EXTRA:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "msg_size,endpoints,auth,run,throughput_msgs_per_s,latency_p50_us,latency_p99_us,cpu_cores,datagrams_per_s,packets_per_datagram,sealed,refused,violations,load1,latency_max_us,delivery_gap_ms,key_activations"
for point in $POINTS; do
  size=${point%%:*}
  n=${point##*:}
  for run in $(seq "$REPEAT"); do
    for mode in $MODES; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      rm -f "$tmp/r.json"
      # shellcheck disable=SC2086
      if ! "$bin" up --hosts "$n" --workload all-to-all --msg-size "$size" --rate "$RATE" \
           --duration "$DURATION" --auth "$mode" $EXTRA --json "$tmp/r.json" >"$tmp/out" 2>&1; then
        echo "# run failed: $size B × $n, auth $mode: $(tail -3 "$tmp/out" | tr '\n' ' ')" >&2
      fi
      [ -f "$tmp/r.json" ] || continue
      python3 - "$tmp/r.json" "$size" "$n" "$mode" "$run" "$load" <<'PY' | tee -a "$tmp/all.csv"
import json, sys
path, size, n, mode, run, load = sys.argv[1:]
r = json.load(open(path))
a = r["auth"]
print(f'{size},{n},{mode},{run},{r["throughput_msgs_per_s"]:.0f},{r["latency_ns"]["p50"]/1e3:.0f},'
      f'{r["latency_ns"]["p99"]/1e3:.0f},{r["cpu_s_total"] / r["delivery_span_s"]:.2f},'
      f'{r["datagrams_per_s"]:.0f},{r["packets_per_datagram"]:.1f},{a["sealed"]},{a["refused_total"]},'
      f'{r["violations"]},{load},{r["latency_ns"]["max"]/1e3:.0f},{r["delivery_gap_ms"]:.2f},{a["key_activations"]}')
PY
    done
  done
done
python3 - "$tmp/all.csv" >&2 <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
points = {}
for size, n, mode, _run, tput, *_ in rows:
    points.setdefault((int(size), int(n)), {}).setdefault(mode, []).append(float(tput))
for (size, n), modes in sorted(points.items()):
    off = statistics.median(modes.get("off", [0])) or 1
    for mode, v in sorted(modes.items()):
        med = statistics.median(v)
        print(f"{size} B x {n}: auth {mode:8} median {med:9.0f} msgs/s "
              f"(min {min(v):.0f}, max {max(v):.0f}, {len(v)} runs), cost {100 * (1 - med / off):.1f}% of off's")
PY
