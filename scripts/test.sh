#!/usr/bin/env bash
# The whole test suite: formatting, lints (including the sans-IO rule), rustdoc, every test of every
# crate (benchmarks run once each in test mode so they cannot rot), and the planted-bug check.
# Needs only a Rust toolchain (rustup's stable, with rustfmt and clippy); it installs what else
# it needs. Run from anywhere: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

# `onepipe bench fig8 --quick` (a test) draws its plots with a TrueType font read at run time.
if [ -z "${ONEPIPE_FONT:-}" ] && [ ! -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
  (apt-get install -y -q fonts-dejavu-core || (apt-get update -q && apt-get install -y -q fonts-dejavu-core)) >/dev/null
fi

# The controller store's etcd feature: `etcd-client` runs `protoc` at build time, and its
# failover test starts Debian's etcd (`etcd-server`) on loopback.
if ! command -v etcd >/dev/null 2>&1 || ! command -v protoc >/dev/null 2>&1; then
  (apt-get install -y -q etcd-server protobuf-compiler || (apt-get update -q && apt-get install -y -q etcd-server protobuf-compiler)) >/dev/null
fi

# Each phase says when it starts (seconds since the suite began): CI must finish inside 15 minutes
# on 2 cores (the current figure: docs/BENCHMARKS.md "The suite"), and these lines say where
# the time goes.
phase() { echo "== [${SECONDS}s] $*"; }
# The builds (tests with every feature, then each planted bug's rebuild) need about 10 GB under
# target/. Say so at the start: a full disk otherwise shows up only as a broken build late on.
free_gb=$(df -Pk . | awk 'NR==2{print int($4/1048576)}')
phase "disk: ${free_gb} GB free here"
[ "$free_gb" -ge 12 ] || echo "warning: the suite's builds need about 10 GB; only ${free_gb} GB are free"
phase "planted bugs: every mutant's text is still in the tree (the full check runs last)"
scripts/planted-bugs.sh --check
phase "size rules and the driving contract (crates/lint: files <= 1,200 lines, non-test functions <= 80, drivers change roles only through Node or node.rs's Direct calls)"
cargo run -q -p onepipe-lint
phase "cargo fmt --check"
cargo fmt --all -- --check
# Clippy and rustdoc run under the test profile (`--profile test`: the same code and cfgs, since
# debug assertions are on in both), so that the dependencies' build-script runs (aws-lc's C
# build above all) and the proc macros they compile are the ones the test build below reuses,
# not a second set for the dev profile (docs/BENCHMARKS.md, "The suite").
phase "cargo clippy -D warnings (default features)"
cargo clippy --workspace --all-targets --profile test -- -D warnings
# Every feature at once (etcd: the controller store; tokio: async receive): one more check build
# instead of one per feature.
phase "cargo clippy -D warnings (--all-features: etcd, tokio)"
cargo clippy --workspace --all-targets --all-features --profile test -- -D warnings
phase "the library is only a library (no command-line, plotting or progress-bar crates, no simulator)"
if cargo tree -q -p onepipe -e normal --all-features | grep -E '(^|[^a-z_-])(clap|plotters|indicatif|onepipe-sim) v'; then
  echo "the onepipe library pulls in a command-line crate or the simulator (see above)" >&2
  exit 1
fi
phase "cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet --profile test
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The tests build once, with every feature: besides the default build's tests this runs the
# controller store's failover against a real etcd (ctrlstore tests/etcd.rs), the live controller
# failover (`onepipe up --etcd` kills the leading controller mid-round: cli tests/live_etcd.rs)
# and async receive through futures on loopback (onepipe tests/live_async.rs, the async doc
# examples).
# One feature set for both commands below, so the second reuses the first's build.
phase "cargo test (--all-features)"
cargo test --workspace --all-targets --all-features 2>&1 | tee -a "$log"
phase "doc tests (--all-features)"
cargo test --workspace --doc --all-features 2>&1 | tee -a "$log"
# A cluster across Linux network namespaces (scripts/netns-cluster.sh, docs/DEPLOY.md): 4 hosts
# and 3 aggregators each in a network stack of its own, MTU 1,500, 10^-3 loss on one cable, run
# by the debug binary the tests above built. Needs root and `ip netns`; says so and skips
# otherwise.
phase "network namespaces: 4 hosts, 2 layers, MTU 1,500, 10^-3 loss on h1's cable (scripts/netns-cluster.sh)"
if [ "$(id -u)" = 0 ] && ip netns add onepipe-probe-$$ 2>/dev/null && ip netns del onepipe-probe-$$; then
  ONEPIPE_NETNS_PREFIX=onpt scripts/netns-cluster.sh --hosts 4 --layers 2 --duration 3s --rate 500 \
    --loss h1=0.001 --bin target/debug/onepipe
else
  echo "skipped: the network-namespace cluster needs root and a kernel that lets it create network namespaces (ip netns add)"
fi
phase "planted bugs (each must make the suite fail)"
scripts/planted-bugs.sh | tee -a "$log"

passed=$(awk '/^test result: /{for(i=1;i<=NF;i++) if($(i+1) ~ /^passed/) s+=$i} END{print s+0}' "$log")
failed=$(awk '/^test result: /{for(i=1;i<=NF;i++) if($(i+1) ~ /^failed/) s+=$i} END{print s+0}' "$log")
caught=$(grep -c '^caught ' "$log" || true)
echo "suite: $((passed + caught)) passed, $failed failed ($passed tests, $caught planted bugs caught) in ${SECONDS}s"
