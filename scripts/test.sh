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

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo clippy -D warnings (the etcd feature: onepipe-ctrlstore, onepipe-runtime, onepipe)"
cargo clippy -p onepipe-ctrlstore -p onepipe-runtime -p onepipe --features onepipe/etcd --all-targets -- -D warnings
echo "== cargo clippy -D warnings (the tokio feature: async receive)"
cargo clippy -p onepipe --features tokio --all-targets -- -D warnings
cargo clippy -p onepipe-runtime --features tokio --all-targets -- -D warnings
echo "== cargo doc -D warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "== cargo test"
cargo test --workspace --all-targets 2>&1 | tee -a "$log"
# Its unit tests ran above; here the failover tests against a real etcd (the feature's build is
# the ~90 crates of etcd-client, a few minutes once, then cached).
echo "== controller store on etcd (cargo test -p onepipe-ctrlstore --features etcd --test etcd)"
cargo test -p onepipe-ctrlstore --features etcd --test etcd 2>&1 | tee -a "$log"
# The live failover: `onepipe up --etcd` kills the leading controller mid-round and the standby
# finishes it (one ~5 s run; the build reuses etcd-client from the line above).
echo "== live controller failover on etcd (cargo test -p onepipe --features etcd --test live_etcd)"
cargo test -p onepipe --features etcd --test live_etcd 2>&1 | tee -a "$log"
# Async receive (the tokio feature): its unit test, the async doc examples, and the endpoints
# receiving through futures on loopback.
echo "== async receive (cargo test -p onepipe-runtime -p onepipe --features onepipe/tokio)"
cargo test -p onepipe-runtime --features tokio --lib queue 2>&1 | tee -a "$log"
cargo test -p onepipe-runtime --features tokio --doc async 2>&1 | tee -a "$log"
cargo test -p onepipe --features tokio --test live_async 2>&1 | tee -a "$log"
cargo test -p onepipe --features tokio --doc 2>&1 | tee -a "$log"
echo "== doc tests"
cargo test --workspace --doc 2>&1 | tee -a "$log"
echo "== planted bugs (each must make the suite fail)"
scripts/planted-bugs.sh | tee -a "$log"

passed=$(awk '/^test result: /{for(i=1;i<=NF;i++) if($(i+1) ~ /^passed/) s+=$i} END{print s+0}' "$log")
failed=$(awk '/^test result: /{for(i=1;i<=NF;i++) if($(i+1) ~ /^failed/) s+=$i} END{print s+0}' "$log")
caught=$(grep -c '^caught ' "$log" || true)
echo "suite: $((passed + caught)) passed, $failed failed ($passed tests, $caught planted bugs caught)"
