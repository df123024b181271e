#!/usr/bin/env bash
# `make run`, `make run-s3`: a secrets key for a development om at
# DIR/secrets.key (made once, 0600), its path printed. It lies beside the
# store, so it protects nothing on that disk; a production key lives apart
# from the data (docs/security.md, "S3 secrets at rest").
set -euo pipefail
dir="${1:?usage: dev-secrets-key.sh DIR}"
mkdir -p "$dir"
key="$dir/secrets.key"
if [ ! -s "$key" ]; then
  (umask 077 && printf 'dev %s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$key")
fi
echo "$key"
