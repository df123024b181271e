# The two commands a new user needs (see README.md):
#   make run   - start a single-node om on ./data (gRPC 127.0.0.1:9862, HTTP 127.0.0.1:9874)
#   make test  - run every test
# Both install missing system packages first (scripts/setup.sh).
#
# One build profile (release) serves running, testing and benchmarking, so RocksDB's
# C++ is compiled once. Set CARGO_TARGET_DIR to share a target directory between clones.

DATA_DIR ?= data
CARGO ?= cargo

.PHONY: setup setup-test run run-s3 test build bench-cluster bench-tls bench-objects bench-listing bench-lifecycle bench-snapshots bench-scale bench-backup bench-s3 bench-profile soak-retry-cache soak fmt lint

setup:
	@bash scripts/setup.sh

# What the tests need besides (promtool for the alert rules).
setup-test:
	@bash scripts/setup.sh --tests

build: setup
	$(CARGO) build --release --workspace --bins

run: build
	$(CARGO) run --release -p om --bin om -- --data-dir $(DATA_DIR) \
	  --secrets-key-file "$$(bash scripts/dev-secrets-key.sh $(DATA_DIR))"

# A single-node om and the S3 gateway om-s3 (127.0.0.1:9878) in front of it.
run-s3: build
	DATA_DIR=$(DATA_DIR) bash scripts/run-s3.sh

# One cargo invocation compiles the binaries and every test target together (the
# tests start the real `om` binary); the others only run what it built. Each names
# the whole workspace (`--workspace`, filtered by `--test` and test names): cargo
# resolves features over the packages selected, and `-p om-tests` would resolve
# them anew and compile om and its dependencies a second time. The second run
# repeats the in-process cluster suites (`cluster::`, `linearizable::`) with mutual
# TLS on every connection; `deploy::force_new_cluster` only shares the suffix.
# rustc's incremental cache can go stale across toolchains and clones sharing a
# target directory (a link then fails on an undefined hidden symbol): a failed
# build is retried once without that cache; a real compile error fails twice.
test: setup-test
	$(CARGO) build --release --workspace --all-targets || { \
	  echo "build failed; retrying once without the incremental cache" >&2; \
	  rm -rf "$${CARGO_TARGET_DIR:-target}/release/incremental"; \
	  $(CARGO) build --release --workspace --all-targets; }
	$(CARGO) test --release --workspace
	OM_TEST_MTLS=1 $(CARGO) test --release --workspace --test integration --test faults -- \
	  cluster:: linearizable:: --skip deploy::

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

# Side-by-side om vs etcd benchmark on a local 3-node cluster (see BENCHMARKS.md).
# BENCH_FLAGS: extra `omctl bench` flags, e.g. BENCH_FLAGS=--spread.
# CPUS_PER_NODE=C: each member and the client capped at C cores (cgroups, root):
# members modelled on machines of their own.
bench-cluster: build
	bash scripts/bench-cluster.sh $(if $(CPUS_PER_NODE),--cpus-per-node $(CPUS_PER_NODE)) $(BENCH_FLAGS)

# CPU profile of the leader and a follower under writes (MODE=reads for reads).
CLIENTS ?= 64
bench-profile: build
	bash scripts/bench-profile.sh $(CLIENTS)

bench-tls: build
	bash scripts/bench-tls.sh

# Write/copy throughput and CopyKey vs MD5 on one node (see BENCHMARKS.md).
bench-objects: build
	$(CARGO) run --release --bin objects_bench

# Listing benchmarks: tombstone bands, delimiter roll-up, gRPC pages (see BENCHMARKS.md).
bench-listing: build
	$(CARGO) run --release --bin listing_bench

# Lifecycle scans: a pass over 1M keys, PutKey latency during passes, resume
# cost, listings after expiry (see BENCHMARKS.md).
bench-lifecycle: build
	$(CARGO) run --release --bin lifecycle_bench

# Bucket snapshots: create on 1k and 1M keys, a diff against a full walk of
# both images, PutKey p99 with 10 snapshots held (see BENCHMARKS.md).
bench-snapshots: build
	$(CARGO) run --release --bin snapshot_bench

# 1M-key state on 3 nodes: load, latency, obrwk mix, catch-up (SST vs one-batch
# install), restart to ready (see BENCHMARKS.md, "Scale"). For 10M:
# make bench-scale KEYS=10000000 SNAPSHOT_EVERY=10000 INSTALLS=ingest
KEYS ?= 1000000
bench-scale: build
	bash scripts/bench-scale.sh $(KEYS)

# Backups of a KEYS-key state on 3 nodes: foreground latency during a backup,
# MB/s, RSS, an incremental backup after 1 % of the keys changed, restore time.
bench-backup: build
	bash scripts/bench-backup.sh $(KEYS)

# Retry-cache expiry under a 10-minute write load at 256 clients (see BENCHMARKS.md).
# The S3 gateway: PUT/GET throughput and latency, om's cost per S3 operation,
# each beside its physical limit. GATEWAY_CPUS=1 caps the gateway at one core
# (as root): make bench-s3 GATEWAY_CPUS=1
bench-s3: build
	bash scripts/bench-s3.sh

soak-retry-cache: build
	bash scripts/retry-cache-soak.sh

# The long fault runs (fault schedules, partitions, power cuts), each over
# SOAK_SEEDS seeds (default 20) of SOAK_SECONDS each (default 60), one after
# another; the summary goes to SOAK_OUT (default soak-summary.md), and
# RELIABILITY.md keeps each release's. Partitions and power cuts need root
# (and /dev/fuse); without, the summary says skipped and why. E.g.
# make soak SOAK_SEEDS=5 SOAK_SECONDS=30
soak: build
	bash scripts/soak.sh
