#!/usr/bin/env bash
# The whole test suite: formatting, lints (including the sans-IO rule), every test of every
# crate (benchmarks run once each in test mode so they cannot rot), and the planted-bug check.
# Needs only a Rust toolchain (rustup's stable, with rustfmt and clippy); it installs what else
# it needs. Run from anywhere: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace --all-targets
echo "== doc tests"
cargo test --workspace --doc
echo "== planted bugs (each must make the suite fail)"
scripts/planted-bugs.sh
