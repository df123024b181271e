#!/usr/bin/env bash
# Installs what building om needs beyond the Rust toolchain, and nothing when it
# is already there: a C++ compiler and make for RocksDB, and libclang for the
# RocksDB bindings (bindgen). Runs as root or through sudo.
set -euo pipefail

need=()
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
have_libclang() {
  local f
  for f in "${LIBCLANG_PATH:-/nonexistent}"/libclang*.so* /usr/lib/llvm-*/lib/libclang*.so* \
           /usr/lib/*-linux-gnu/libclang*.so*; do
    [ -e "$f" ] && return 0
  done
  return 1
}
have_libclang || need+=(libclang-dev)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${need[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: need root or sudo to install ${need[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
