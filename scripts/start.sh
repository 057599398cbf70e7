#!/usr/bin/env bash
# Builds Sextant and runs a command on its embedded default: data in
# ./sextant-data, no other service needed. Extra arguments go to `sextant`
# (default: `status`). Example: scripts/start.sh import /usr/include /inc
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-deps.sh
cargo build --release --locked -p sextant-cli
bin="$PWD/target/release/sextant"
if [ $# -eq 0 ]; then set -- status; fi
echo "sextant: data in ${SEXTANT_DATA:-$PWD/sextant-data} (binary: $bin)" >&2
exec "$bin" "$@"
