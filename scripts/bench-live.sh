#!/usr/bin/env bash
# The live benchmark of docs/BENCHMARKS.md ("Live cluster"): `onepipe up` with and without
# --unordered, at 64 B and 1 KB, with 4 and 8 endpoints, over a sweep of offered rates; one CSV
# line per run on standard output. Not a test: it takes several minutes and measures this machine.
#
#   scripts/bench-live.sh > live.csv                 # the full sweep
#   RATES="1000" SIZES="64" ENDPOINTS="4" scripts/bench-live.sh   # one point
#   REPEAT=3 scripts/bench-live.sh > live.csv        # every point three times
#   AGGREGATOR_MODE=host scripts/bench-live.sh       # §6.2.3 host representatives instead of chip
#   LAYERS=1 scripts/bench-live.sh                   # every endpoint under one aggregator
#   MODES=ordered scripts/bench-live.sh              # only the ordered runs
#   EXTRA="--datagram-len-max 1472" scripts/bench-live.sh   # more flags for every run
#
# Ordered and unordered runs of one point alternate (ordered, unordered, ordered, … REPEAT times
# each), so a shared machine's changing load falls on both alike; each line carries the 1-minute
# load average when its run started. Report ranges, not single runs.
#
# Needs a release build (cargo build --release -p onepipe-cli) and python3 to read the JSON reports.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./target/release/onepipe
RATES=${RATES:-"1000 10000 20000 40000 60000 100000"}
SIZES=${SIZES:-"64 1024"}
ENDPOINTS=${ENDPOINTS:-"4 8"}
DURATION=${DURATION:-3s}
REPEAT=${REPEAT:-1}
AGGREGATOR_MODE=${AGGREGATOR_MODE:-chip}
LAYERS=${LAYERS:-2}
MODES=${MODES:-"ordered unordered"}
EXTRA=${EXTRA:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "endpoints,msg_size,mode,rate_per_proc,sent,delivered,loss,throughput_msgs_per_s,delivery_span_s,latency_p50_us,latency_p99_us,violations,packets_per_datagram,sends_refused_full,load1,aggregator_mode,layers,datagrams_per_s,datagram_len_max,gso,kernel_drops,cpu_cores,drained"
for n in $ENDPOINTS; do
  for size in $SIZES; do
    for rate in $RATES; do
      for _ in $(seq "$REPEAT"); do
        for mode in $MODES; do
          flag=""
          [ "$mode" = unordered ] && flag="--unordered"
          load=$(cut -d' ' -f1 /proc/loadavg)
          rm -f "$tmp/r.json"
          # shellcheck disable=SC2086
          if ! "$bin" up --hosts "$n" --workload all-to-all --msg-size "$size" --rate "$rate" \
               --duration "$DURATION" --aggregator-mode "$AGGREGATOR_MODE" --layers "$LAYERS" \
               $flag $EXTRA --json "$tmp/r.json" >"$tmp/out" 2>&1; then
            echo "# run failed: $n endpoints, $size B, $rate/s, $mode: $(tail -3 "$tmp/out" | tr '\n' ' ')" >&2
          fi
          [ -f "$tmp/r.json" ] || continue
          python3 - "$tmp/r.json" "$n" "$size" "$mode" "$rate" "$load" "$LAYERS" <<'PY'
import json, sys
path, n, size, mode, rate, load, layers = sys.argv[1:]
r = json.load(open(path))
loss = 1 - r["delivered"] / r["sent"] if r["sent"] else 0
print(f'{n},{size},{mode},{rate},{r["sent"]},{r["delivered"]},{loss:.4f},{r["throughput_msgs_per_s"]:.0f},{r["delivery_span_s"]:.2f},'
      f'{r["latency_ns"]["p50"]/1e3:.0f},{r["latency_ns"]["p99"]/1e3:.0f},{r["violations"]},{r["packets_per_datagram"]:.1f},'
      f'{r["sends_refused_full"]},{load},{r["aggregator_mode"]},{layers},{r["datagrams_per_s"]:.0f},'
      f'{r["datagram_len_max"]},{int(r["gso"])},{r["datagrams_dropped_rcvbuf"]},'
      f'{r["cpu_s_total"] / r["delivery_span_s"]:.2f},{int(r["drained"])}')
PY
        done
      done
    done
  done
done
