#!/usr/bin/env bash
# Installs what building and testing Sextant needs when it is missing:
# a Rust toolchain with rustfmt and clippy, and for the FUSE mount and its
# tests fusermount3 (fuse3), setfattr/getfattr (attr) and setpriv
# (util-linux). Sourced by start.sh and test.sh.
set -euo pipefail

need_apt=()
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    need_apt+=(cargo rustc)
  fi
fi
if ! command -v cc >/dev/null 2>&1; then need_apt+=(build-essential); fi
if ! command -v pkg-config >/dev/null 2>&1; then need_apt+=(pkg-config); fi
if ! command -v fusermount3 >/dev/null 2>&1; then need_apt+=(fuse3); fi
if ! command -v setfattr >/dev/null 2>&1; then need_apt+=(attr); fi
if ! command -v setpriv >/dev/null 2>&1; then need_apt+=(util-linux); fi
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
