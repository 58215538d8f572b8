#!/usr/bin/env bash
# Builds `target/pgo/release/onepipe`: the release build of the `onepipe` binary, optimised with a
# profile of training runs (profile-guided optimisation). The simulator is branchy code whose
# hot paths the compiler cannot see; with the profile it lays them out straight and inlines by
# measured frequency (docs/BENCHMARKS.md, "Simulator speed", has what it gains).
#
# The training runs are *not* the benchmarks: smaller fat trees (k = 8 and 12), other switch
# modes, services and workloads, and a few swarm seeds — so the profile describes the simulator,
# not one command. Needs rustup's `llvm-tools` component (installed if missing) for
# `llvm-profdata`, which must match rustc's LLVM. Two full release builds: ~5 minutes on 2 cores.
#
# Usage: scripts/build-pgo.sh        then: target/pgo/release/onepipe sim ...
set -euo pipefail
cd "$(dirname "$0")/.."

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  rustup component add llvm-tools
fi
if [ ! -x "$profdata" ]; then
  echo "build-pgo: no llvm-profdata at $profdata (rustup component add llvm-tools failed?)" >&2
  exit 1
fi

profiles="$PWD/target/pgo-profiles"
rm -rf "$profiles"
mkdir -p "$profiles"

echo "== instrumented build (target/pgo-gen)"
RUSTFLAGS="-Cprofile-generate=$profiles" \
  cargo build --release -p onepipe-cli --bin onepipe --target-dir target/pgo-gen
gen=target/pgo-gen/release/onepipe

echo "== training runs"
run() { echo "  onepipe $*"; "$gen" "$@" --quiet >/dev/null; }
run sim --topology fat-tree --k 8 --workload all-to-all --rate 20000 --duration 2ms --no-check
run sim --topology fat-tree --k 12 --workload all-to-all --rate 2000 --duration 1ms --no-check
run sim --topology fat-tree --k 8 --switch cpu --workload scatter --rate 50000 --duration 4ms
run sim --topology leaf-spine --hosts 64 --service reliable --workload all-to-all --rate 20000 --duration 1ms
echo "  onepipe vopr --seeds 6 --duration 3ms"
"$gen" vopr --seeds 6 --duration 3ms >/dev/null

"$profdata" merge -o "$profiles/merged.profdata" "$profiles"

echo "== optimised build (target/pgo)"
RUSTFLAGS="-Cprofile-use=$profiles/merged.profdata" \
  cargo build --release -p onepipe-cli --bin onepipe --target-dir target/pgo
echo "built target/pgo/release/onepipe"
