#!/usr/bin/env bash
# Runs Sextant's whole test suite: formatting, lints, and every test
# (unit, model-based, crash, corruption, decoder robustness).
# Extended modes: SEXTANT_CRASH_KILLS=200 and SEXTANT_MODEL_CASES=1000.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-deps.sh
# A clean clone builds once: incremental caches would only cost disk
# (they doubled target/ on CI's machine).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked 2>&1 | tee target/test-output.txt
# One closing line for CI: totals over every test binary.
awk '/^test result:/ { p += $4; f += $6; s += $8 }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' target/test-output.txt
