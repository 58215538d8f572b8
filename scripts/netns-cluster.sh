#!/usr/bin/env bash
# A onepipe cluster across Linux network namespaces: every machine (each endpoint host, each
# aggregator, the controller) is a namespace of its own with its own network stack, address,
# MTU and queues, cabled by veth pairs to bridges (one per rack, one for the spine layer) that
# live in a "fabric" namespace. The daemons run inside their namespaces with exactly the
# commands docs/DEPLOY.md gives for real machines; `onepipe up --cluster FILE --spawn PREFIX`
# starts them, coordinates the run and checks it as it does on loopback.
#
#   scripts/netns-cluster.sh --hosts N --layers 1|2 [--rack-size K] [--mtu 1500|9000]
#       [--loss LINK=RATE]... [--dup LINK=RATE]... [--cut LINK@T]... [--kill proc:N@T]...
#       [--service be|reliable] [--duration 5s] [--rate R] [--keep] [--bin PATH] [-- UP_FLAGS...]
#
# LINK is a member's cable to its bridge: `hN` (host N), an aggregator's name (`tor-0`,
# `spine-0`) or `controller`. --loss drops RATE of the IPv4 packets in each direction of it
# (an htb leaf with `pfifo limit 0`, chosen by a classic-BPF filter on `ld rand`); --dup sends
# RATE more of them twice (the same filter with a `mirred` mirror action); --cut sets the cable
# down T after sending starts. --kill, and whatever follows `--`, are `onepipe up`'s flags
# (`-- --restart proc:3@4s --msg-size 1000`). Needs root; installs ethtool and jq if
# missing. Everything is torn down at the end, also on failure or Ctrl-C, and a run that was
# killed is cleaned up by the next one. The exit code is `onepipe up`'s (0 clean, 1 a
# violation or not drained, 2 bad flags, 3 a process failed); 4: this machine cannot run it.
#
# Namespaces are named $ONEPIPE_NETNS_PREFIX-NAME (default `onp`); addresses are in
# 10.77.0.0/16 inside them. Nothing is created in the root namespace.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }

hosts=4 layers=2 rack_size=2 mtu=1500 service=be duration=5s rate=2000 keep=0 bin=""
loss=() dup=() cuts=() kills=() extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --rack-size) rack_size=$2; shift 2 ;;
    --mtu) mtu=$2; shift 2 ;;
    --loss) loss+=("$2"); shift 2 ;;
    --dup) dup+=("$2"); shift 2 ;;
    --cut) cuts+=("$2"); shift 2 ;;
    --kill) kills+=("$2"); shift 2 ;;
    --service) service=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --bin) bin=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "netns-cluster: unknown flag $1" >&2; usage ;;
  esac
done
case $layers in 1|2) ;; *) echo "netns-cluster: --layers is 1 or 2" >&2; exit 2 ;; esac
if [ -z "$bin" ]; then
  for b in target/release/onepipe target/debug/onepipe; do
    [ -x "$b" ] && { bin=$b; break; }
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "netns-cluster: no onepipe binary (cargo build --release -p onepipe-cli, or --bin PATH)" >&2; exit 2; }
bin=$(readlink -f "$bin")

# What this machine must allow: root, network namespaces, tc; ethtool and jq are installed.
if [ "$(id -u)" != 0 ]; then echo "netns-cluster: needs root (network namespaces)" >&2; exit 4; fi
for tool in ip tc; do
  command -v $tool >/dev/null || { echo "netns-cluster: needs $tool (iproute2)" >&2; exit 4; }
done
if ! command -v ethtool >/dev/null || ! command -v jq >/dev/null; then
  (apt-get install -y -q ethtool jq || (apt-get update -q && apt-get install -y -q ethtool jq)) >/dev/null
fi

prefix=${ONEPIPE_NETNS_PREFIX:-onp}
fabric=$prefix-fabric
dir=$(mktemp -d /tmp/onepipe-netns.XXXXXX)
timers=$dir/timers

# Kills whatever runs in our namespaces and deletes them: the previous run's leftovers first,
# and this run's at exit.
teardown() {
  local ns pid
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}
on_exit() {
  local code=$?
  trap - EXIT INT TERM
  # `up` stops its members in order on SIGTERM; whatever is left is killed with the namespaces.
  if [ -n "${up_pid:-}" ] && kill "$up_pid" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  if [ -f "$timers" ]; then xargs -r kill 2>/dev/null <"$timers" || true; fi
  teardown
  if [ "$keep" = 1 ]; then echo "netns-cluster: run directory kept: $dir" >&2; else rm -rf "$dir"; fi
  exit "$code"
}
teardown
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- The cluster file: `onepipe topology` with the keys, then each member's real address. ----
# Addresses: the controller 10.77.0.1, the aggregators 10.77.0.10 onwards (in file order), host N
# 10.77.1.(N+1); fixed ports (the controller's TCP 7400, each member's UDP 7500), one per machine.
[ "$hosts" -le 250 ] || { echo "netns-cluster: at most 250 hosts" >&2; exit 2; }
(cd "$dir" && "$bin" topology --hosts "$hosts" --procs-per-host 1 --layers "$layers" \
   --rack-size "$rack_size" --controller 10.77.0.1:7400 --pki pki >cluster.toml)
awk '
  /^clock = / { print "clock = \"realtime\""; next }
  /^\[\[aggregator\]\]/ { kind = "agg" }
  /^\[\[process\]\]/ { kind = "proc" }
  /^name = / && kind == "agg" { aggs++ }
  /^host = / && kind == "proc" { split($0, h, " = "); host = h[2] }
  /^addr = / && kind == "agg" { printf "addr = \"10.77.0.%d:7500\"\n", 9 + aggs; next }
  /^addr = / && kind == "proc" { printf "addr = \"10.77.1.%d:7500\"\n", host + 1; next }
  { print }
' "$dir/cluster.toml" >"$dir/cluster.real.toml"
mv "$dir/cluster.real.toml" "$dir/cluster.toml"

# Members as "NAME ADDRESS BRIDGE": a leaf aggregator and its hosts share a rack bridge
# (br-NAME), the controller and the aggregators above the racks sit on br-spine.
members=$(awk '
  function unquote(s) { gsub(/"/, "", s); return s }
  /^\[\[aggregator\]\]/ { kind = "agg" }
  /^\[\[process\]\]/ { kind = "proc" }
  kind == "agg" && /^name = / { name = unquote($3); aggs[++n] = name }
  kind == "agg" && /^addr = / { split(unquote($3), a, ":"); addr[name] = a[1] }
  kind == "proc" && /^host = / { host = "h" $3 }
  kind == "proc" && /^addr = / { split(unquote($3), a, ":"); paddr = a[1] }
  kind == "proc" && /^aggregator = / { agg = unquote($3); leaf[agg] = 1; print host, paddr, "br-" agg }
  END {
    print "controller 10.77.0.1 br-spine"
    for (i = 1; i <= n; i++) print aggs[i], addr[aggs[i]], (aggs[i] in leaf) ? "br-" aggs[i] : "br-spine"
  }
' "$dir/cluster.toml")

# ---- The network: namespaces, bridges, cables, addresses, MTU, GRO. ----
ip netns add "$fabric"
ip -n "$fabric" link set lo up
bridges=$(echo "$members" | awk '{print $3}' | sort -u)
for br in $bridges; do
  ip -n "$fabric" link add "$br" type bridge
  ip -n "$fabric" link set "$br" mtu "$mtu" up
  if [ "$br" != br-spine ]; then
    # A rack's uplink to the spine: one cable between the two bridges.
    up_dev=u-${br#br-} down_dev=d-${br#br-}
    ip -n "$fabric" link add "$up_dev" type veth peer name "$down_dev"
    ip -n "$fabric" link set "$up_dev" mtu "$mtu" master "$br" up
    ip -n "$fabric" link set "$down_dev" mtu "$mtu" master br-spine up
  fi
done
while read -r name addr br; do
  ns=$prefix-$name
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$fabric" link add "v-$name" type veth peer name eth0 netns "$ns"
  ip -n "$fabric" link set "v-$name" mtu "$mtu" master "$br" up
  ip -n "$ns" link set eth0 mtu "$mtu" up
  ip -n "$ns" addr add "$addr/16" dev eth0
  ip netns exec "$ns" ethtool -K eth0 gro on >/dev/null
  ip netns exec "$fabric" ethtool -K "v-$name" gro on >/dev/null
done <<<"$members"

# ---- Faults on cables: loss and duplication, both directions. ----
# A classic-BPF program: A = a random u32 (ld [SKF_AD_OFF + SKF_AD_RANDOM]); if A < RATE x 2^32
# it matches (returns -1: the filter's class), else not (0).
bpf_rand() {
  local threshold
  threshold=$(awk -v r="$1" 'BEGIN { printf "%.0f", r * 4294967296 }')
  echo "4,32 0 0 4294963256,53 1 0 $threshold,6 0 0 4294967295,6 0 0 0"
}
cable_ends() { echo "$fabric v-$1" "$prefix-$1 eth0"; }
check_link() {
  echo "$members" | awk '{print $1}' | grep -qx "$1" ||
    { echo "netns-cluster: no member '$1' (hN, an aggregator's name or controller)" >&2; exit 2; }
}
for spec in "${loss[@]}"; do
  link=${spec%%=*} r=${spec#*=}
  check_link "$link"
  for end in $(cable_ends "$link" | tr ' ' ':'); do
    ns=${end%%:*} dev=${end#*:}
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: htb default 10
    ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:10 htb rate 100gbit quantum 60000
    ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:20 htb rate 100gbit quantum 60000
    ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:20 handle 20: pfifo limit 0
    ip netns exec "$ns" tc filter add dev "$dev" parent 1: protocol ip prio 1 \
      bpf bytecode "$(bpf_rand "$r")" flowid 1:20
  done
done
for spec in "${dup[@]}"; do
  link=${spec%%=*} r=${spec#*=}
  check_link "$link"
  for end in $(cable_ends "$link" | tr ' ' ':'); do
    ns=${end%%:*} dev=${end#*:}
    ip netns exec "$ns" tc qdisc add dev "$dev" clsact
    ip netns exec "$ns" tc filter add dev "$dev" egress protocol ip prio 1 \
      bpf bytecode "$(bpf_rand "$r")" action mirred egress mirror dev "$dev"
  done
done
for spec in "${cuts[@]}"; do check_link "${spec%%@*}"; done

# ---- The run: `onepipe up` on this cluster file, each member in its namespace. ----
seconds() { awk -v d="$1" 'BEGIN { n = d + 0; if (d ~ /ms$/) n /= 1000; else if (d ~ /us$/) n /= 1e6; print n }'; }
start_cuts() {
  local spec
  for spec in "${cuts[@]}"; do
    (sleep "$(seconds "${spec#*@}")"; ip -n "$fabric" link set "v-${spec%%@*}" down &&
       echo "  netns       cable of ${spec%%@*} set down (--cut $spec)") &
    echo $! >>"$timers"
  done
}
up_args=(up --cluster "$dir/cluster.toml" --spawn "ip netns exec $prefix-{host}"
         --hosts "$hosts" --procs-per-host 1 --service "$service" --duration "$duration"
         --rate "$rate" --json "$dir/up.json")
for k in "${kills[@]}"; do up_args+=(--kill "$k"); done
[ "$keep" = 1 ] && up_args+=(--keep)
up_args+=("${extra[@]}")
echo "netns-cluster: $hosts hosts, $layers layer(s), MTU $mtu, $(echo "$members" | wc -l) namespaces + $fabric; cluster file $dir/cluster.toml"
echo "$members" | awk '{printf "  %-12s %-12s %s\n", $1, $2, $3}'
mkfifo "$dir/up.out"
"$bin" "${up_args[@]}" >"$dir/up.out" &
up_pid=$!
while IFS= read -r line; do
  printf '%s\n' "$line"
  case $line in running*) start_cuts ;; esac
done <"$dir/up.out"
code=0
wait "$up_pid" || code=$?
up_pid=

# ---- The summary: the report's figures and what tc says was injected. ----
tc_counts() {
  local spec link ns dev what=$1 n total=0
  shift
  for spec in "$@"; do
    link=${spec%%=*}
    for end in $(cable_ends "$link" | tr ' ' ':'); do
      ns=${end%%:*} dev=${end#*:}
      if [ "$what" = loss ]; then
        n=$(ip netns exec "$ns" tc -s qdisc show dev "$dev" | awk '/^qdisc pfifo 20:/ { getline; sub(/,/, "", $7); print $7 }')
      else
        n=$(ip netns exec "$ns" tc -s filter show dev "$dev" egress | awk '/Sent/ { print $4; exit }')
      fi
      total=$((total + ${n:-0}))
    done
  done
  echo "$total"
}
if [ -s "$dir/up.json" ]; then
  jq -r --arg mtu "$mtu" --arg lost "$(tc_counts loss "${loss[@]}")" --arg dup "$(tc_counts dup "${dup[@]}")" '
    "netns-cluster: MTU \($mtu): \(.throughput_msgs_per_s | floor) msgs/s, p50 \(.latency_ns.p50 / 1000 | . * 10 | round / 10) µs, "
    + "\(.packets_per_datagram * 100 | round / 100) packets/datagram of up to \(.datagram_len_max) B, "
    + "GSO sends \(.gso_sends), GRO receives \(.gro_receives), "
    + "tc dropped \($lost) and duplicated \($dup) packets, "
    + "\(.violations) violations in \(.checked_deliveries) checked deliveries, drained \(.drained)"
  ' "$dir/up.json"
fi
exit "$code"
