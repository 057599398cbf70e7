#!/usr/bin/env bash
# Builds Sextant and starts the metadata server on its embedded default:
# data in ./sextant-data, listening on 127.0.0.1:7411, no other service
# needed; Ctrl-C stops it cleanly (tables written back). Arguments run
# another `sextant` command instead, e.g. scripts/start.sh status.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-deps.sh
cargo build --release --locked -p sextant-cli
bin="$PWD/target/release/sextant"
if [ $# -eq 0 ]; then set -- serve; fi
echo "sextant: data in ${SEXTANT_DATA:-$PWD/sextant-data} (binary: $bin)" >&2
exec "$bin" "$@"
