#!/usr/bin/env bash
# Installs what building and testing om needs beyond the Rust toolchain, and
# nothing when it is already there: a C++ compiler and make for RocksDB,
# libclang for the RocksDB bindings (bindgen), the S3 clients the gateway is
# tested with (s3cmd, rclone, restic, the AWS CLI and boto3), and promtool and prometheus for
# the alert tests (tests/tests/integration/deploy/; Debian's prometheus package: with
# systemd running, its postinst also enables and starts prometheus.service on
# port 9090, which the tests do not use; in containers without an init it
# does not).
# Runs as root or through sudo.
#
#   scripts/setup.sh                      install what building needs and is missing
#   scripts/setup.sh --tests              the same, and what the tests need (make test)
#   scripts/setup.sh --print-needs        only print the packages building needs
#                                         that it would install
#   scripts/setup.sh --print-test-needs   only print the packages the tests need
#                                         that it would install
#
# libclang is detected by the files bindgen's loader (clang-sys, runtime linking)
# actually opens: libclang.so, libclang-N.so, libclang.so.N and libclang-N.so.N.
# Look-alikes such as libclang-cpp.so.14 (clang's C++ library, present on images
# that have no libclang) do not count. OM_SETUP_ROOT prefixes every searched
# directory, so tests can point the detection at a fake file layout.
set -euo pipefail

root="${OM_SETUP_ROOT:-}"

# Is NAME a file name clang-sys would load as libclang?
is_libclang_name() {
  case "$1" in
    libclang.so | libclang.so.[0-9]*) return 0 ;;
    libclang-[0-9]*.so | libclang-[0-9]*.so.[0-9]*) return 0 ;;
    *) return 1 ;;
  esac
}

# The directories clang-sys searches on Linux (LIBCLANG_PATH first).
libclang_dirs() {
  if [ -n "${LIBCLANG_PATH:-}" ]; then
    echo "$LIBCLANG_PATH"
  fi
  local d
  for d in "$root"/usr/lib/llvm-*/lib "$root"/usr/lib/*-linux-gnu "$root"/usr/lib \
           "$root"/usr/lib64 "$root"/usr/local/lib "$root"/usr/local/lib64 "$root"/lib \
           "$root"/lib/*-linux-gnu "$root"/usr/local/llvm*/lib; do
    [ -d "$d" ] && echo "$d"
  done
  return 0
}

have_libclang() {
  local d f
  while IFS= read -r d; do
    for f in "$d"/libclang*; do
      [ -e "$f" ] || continue
      if is_libclang_name "$(basename "$f")"; then
        return 0
      fi
    done
  done < <(libclang_dirs)
  return 1
}

has_command() {
  if [ -n "$root" ]; then
    [ -x "$root/usr/bin/$1" ]
  else
    command -v "$1" >/dev/null 2>&1
  fi
}

need=()
has_command c++ || need+=(g++)
has_command make || need+=(make)
have_libclang || need+=(libclang-dev)
test_need=()
{ has_command promtool && has_command prometheus; } || test_need+=(prometheus)
# The S3 clients the gateway is tested with (tests/tests/integration/s3_gateway/clients.rs).
has_command s3cmd || test_need+=(s3cmd)
has_command rclone || test_need+=(rclone)
has_command restic || test_need+=(restic)
has_command aws || test_need+=(awscli)
has_boto3() {
  if [ -n "$root" ]; then
    [ -d "$root/usr/lib/python3/dist-packages/boto3" ]
  else
    python3 -c 'import boto3' >/dev/null 2>&1 || /usr/bin/python3 -c 'import boto3' >/dev/null 2>&1
  fi
}
has_boto3 || test_need+=(python3-boto3)

case "${1:-}" in
  --print-needs)
    echo "${need[*]}"
    exit 0
    ;;
  --print-test-needs)
    echo "${test_need[*]}"
    exit 0
    ;;
esac
if [ "${1:-}" = "--tests" ]; then
  need+=("${test_need[@]}")
fi

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
