#!/usr/bin/env bash
# Installs what building and testing Sextant needs when it is missing:
# a Rust toolchain with rustfmt and clippy, and for the FUSE mount and its
# tests fusermount3 (fuse3), setfattr/getfattr (attr) and setpriv
# (util-linux); protoc (protobuf-compiler) to build the etcd client, and
# etcd (etcd-server) for the cluster tests. Sourced by start.sh and test.sh.
#
# The toolchain: Sextant needs Rust >= 1.88 (the workspace's
# rust-version). Debian 12's own `rustc`/`cargo` are 1.63 — too old — so the
# fallback installs Debian's newer `-web` toolchain (rustc-web, cargo-web,
# rustfmt-web, rust-web-clippy: 1.85+ from bookworm, 1.96 from its security
# updates). A toolchain that is still too old stops here with a message
# rather than failing later in the build.
set -euo pipefail

SEXTANT_MIN_RUST=1.88

need_apt=()
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    need_apt+=(cargo-web rustc-web rustfmt-web rust-web-clippy)
  fi
fi
if ! command -v cc >/dev/null 2>&1; then need_apt+=(build-essential); fi
if ! command -v pkg-config >/dev/null 2>&1; then need_apt+=(pkg-config); fi
if ! command -v fusermount3 >/dev/null 2>&1; then need_apt+=(fuse3); fi
if ! command -v setfattr >/dev/null 2>&1; then need_apt+=(attr); fi
if ! command -v setpriv >/dev/null 2>&1; then need_apt+=(util-linux); fi
# The etcd client (crates/coordinator) is generated from etcd's .proto
# files at build time: protoc. Its tests run a real etcd (3.4).
if ! command -v protoc >/dev/null 2>&1; then need_apt+=(protobuf-compiler); fi
if ! command -v etcd >/dev/null 2>&1; then need_apt+=(etcd-server); fi
# Opt-in, for scripts/bench-mount.sh only (not needed by the tests).
if [ "${SEXTANT_BENCH_DEPS:-0}" = 1 ]; then
  if ! command -v postmark >/dev/null 2>&1; then need_apt+=(postmark); fi
  if ! command -v bindfs >/dev/null 2>&1; then need_apt+=(bindfs); fi
  if ! command -v bc >/dev/null 2>&1; then need_apt+=(bc); fi
fi

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "sextant: installing ${need_apt[*]} with apt-get" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt >/dev/null 2>&1 || true
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy >/dev/null 2>&1 || true
fi

# Fail early, and say why, on a toolchain older than the code needs.
rust_version=$(rustc --version 2>/dev/null | awk '{print $2}')
if [ -z "$rust_version" ] ||
   [ "$(printf '%s\n%s\n' "$SEXTANT_MIN_RUST" "${rust_version%%-*}" | sort -V | head -n1)" != "$SEXTANT_MIN_RUST" ]; then
  echo "sextant: Rust ${rust_version:-(none)} is too old: Sextant needs Rust >= $SEXTANT_MIN_RUST." >&2
  echo "  With rustup: rustup update stable. On Debian 12: apt-get install rustc-web cargo-web" >&2
  echo "  (and rustfmt-web rust-web-clippy for the tests); remove the old rustc/cargo packages" >&2
  echo "  if they come first on PATH." >&2
  return 1 2>/dev/null || exit 1
fi
