#!/usr/bin/env bash
# `make run-s3`: a single-node om on $DATA_DIR (default ./data) and the S3
# gateway om-s3 in front of it on 127.0.0.1:9878, blocks in $DATA_DIR/blocks.
# Authentication is off (a development setup): any credential om holds is
# accepted, and om-s3 acts for its user. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}/release"
data="${DATA_DIR:-data}"
mkdir -p "$data"
"$target/om" --data-dir "$data" --secrets-key-file "$(bash scripts/dev-secrets-key.sh "$data")" &
om_pid=$!
trap 'kill "$om_pid" 2>/dev/null; wait "$om_pid" 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 1 100); do
  if "$target/omctl" --timeout 2 cluster status >/dev/null 2>&1; then break; fi
  sleep 0.2
done
cat >&2 <<'TXT'
om is up on 127.0.0.1:9862; starting om-s3 on 127.0.0.1:9878.
Make a credential and use any S3 client:
  omctl s3 secret create me --output json
  aws configure set aws_access_key_id OM...; aws configure set aws_secret_access_key ...
  aws --endpoint-url http://127.0.0.1:9878 s3 mb s3://bucket1
TXT
"$target/om-s3" --endpoint 127.0.0.1:9862 --listen "${OM_S3_LISTEN:-127.0.0.1:9878}" \
  --blocks "$data/blocks" --volume "${OM_S3_VOLUME:-s3v}"
