#!/usr/bin/env bash
# Planted bugs: every mutant in scripts/planted-bugs.txt breaks one rule, and its cheapest tests
# must fail. Run by the tool in crates/planted, which changes the tree IN PLACE (so only the crates
# a mutant touches rebuild, incrementally, on the suite's own build) and puts each file back;
# a run that is killed is undone by the next run, or at once with `--restore`.
# Usage: scripts/planted-bugs.sh [mutant-name ...]
#        scripts/planted-bugs.sh --check     # only that every mutant's text is in the tree
#        scripts/planted-bugs.sh --help      # the tool's other flags
set -euo pipefail
root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
cargo build -q -p onepipe-planted --bin planted
tool="$target/debug/planted"
trap '"$tool" --root "$root" --restore' EXIT
"$tool" --root "$root" "$@"
