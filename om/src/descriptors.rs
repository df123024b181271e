//! The process's file-descriptor budget.
//!
//! Every accepted connection costs a descriptor, and so does every SST file
//! RocksDB keeps open, every snapshot file being built, sent or received and
//! every channel to a Raft peer. When connections take the last descriptor,
//! the next snapshot or SST open fails and Raft stops; so the descriptor limit
//! is raised as far as the process may at start-up, and split up front:
//!
//! - `RESERVED_FDS` for the process itself and the storage and Raft files that
//!   come and go (see the constant);
//! - RocksDB's table cache (`max_open_files`): a quarter of the limit, between
//!   `MIN_DB_FILES` and `MAX_DB_FILES`, unless configured;
//! - the rest for connections: the Raft port an eighth of it (8..=256), the
//!   HTTP port a sixteenth (2..=64) and the public gRPC port everything left,
//!   unless configured.
//!
//! A connection past its port's cap is closed at once, so clients can never
//! take the storage's descriptors.

/// Descriptors kept out of every other share: stdin/stdout/stderr, the
/// runtime's epoll and wake-up descriptors, the three listening sockets,
/// RocksDB's own files besides SSTs (LOCK, LOG, CURRENT, MANIFEST, WAL and
/// directory handles, about a dozen), snapshot files (one being built, one
/// being received, one open per peer being sent it) and one outgoing channel
/// per Raft peer, with room to spare for clusters of up to a dozen members.
pub const RESERVED_FDS: u64 = 64;
/// Smallest table cache RocksDB is given.
pub const MIN_DB_FILES: u64 = 32;
/// Largest table cache RocksDB is given by default (a metadata store of
/// 64 MiB SST files reaches it at about 600 GiB).
pub const MAX_DB_FILES: u64 = 10_000;
/// Fewest connections each port needs to be of any use: public, Raft, HTTP.
pub const MIN_CONNECTIONS: (usize, usize, usize) = (8, 8, 2);

/// Settings that override the derived shares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    pub db_max_open_files: Option<u64>,
    pub grpc_connections: Option<usize>,
    pub raft_connections: Option<usize>,
    pub http_connections: Option<usize>,
}

/// How the descriptor limit is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The soft RLIMIT_NOFILE the shares were taken from.
    pub limit: u64,
    /// RocksDB's `max_open_files`.
    pub db_max_open_files: u64,
    /// Most concurrent connections on the public gRPC port.
    pub grpc_connections: usize,
    /// Most concurrent connections on the Raft port.
    pub raft_connections: usize,
    /// Most concurrent connections on the HTTP port.
    pub http_connections: usize,
}

/// Splits `limit` descriptors (see the module docs). Fails when the limit
/// cannot hold the reserve, RocksDB's share and the smallest useful caps, or
/// when configured shares add up to more than the limit.
pub fn budget(limit: u64, o: &Overrides) -> Result<Budget, String> {
    let (min_grpc, min_raft, min_http) = MIN_CONNECTIONS;
    let min_conns = (min_grpc + min_raft + min_http) as u64;
    let floor = RESERVED_FDS + MIN_DB_FILES + min_conns;
    if limit < floor {
        return Err(format!(
            "the open-file limit is {limit}; om needs at least {floor} \
             (raise it with `ulimit -n` or the service's LimitNOFILE)"
        ));
    }
    let db = o
        .db_max_open_files
        .unwrap_or_else(|| (limit / 4).clamp(MIN_DB_FILES, MAX_DB_FILES));
    let Some(conns) = limit.checked_sub(RESERVED_FDS + db) else {
        return Err(format!(
            "db max open files {db} plus {RESERVED_FDS} reserved descriptors exceed the open-file limit {limit}"
        ));
    };
    let conns = usize::try_from(conns).unwrap_or(usize::MAX);
    let raft = o
        .raft_connections
        .unwrap_or_else(|| (conns / 8).clamp(min_raft, 256));
    let http = o
        .http_connections
        .unwrap_or_else(|| (conns / 16).clamp(min_http, 64));
    let grpc = match o.grpc_connections {
        Some(g) => g,
        None => conns.saturating_sub(raft + http),
    };
    let b = Budget {
        limit,
        db_max_open_files: db,
        grpc_connections: grpc,
        raft_connections: raft,
        http_connections: http,
    };
    if grpc == 0 || raft == 0 || http == 0 {
        return Err(format!("every port needs room for a connection: {b:?}"));
    }
    if grpc.saturating_add(raft).saturating_add(http) > conns {
        return Err(format!(
            "connection caps (gRPC {grpc}, Raft {raft}, HTTP {http}) exceed the {conns} descriptors \
             left by the open-file limit {limit} after {RESERVED_FDS} reserved and {db} for RocksDB"
        ));
    }
    Ok(b)
}

/// The soft and hard RLIMIT_NOFILE of this process.
pub fn nofile_limit() -> std::io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((widen(r.rlim_cur), widen(r.rlim_max)))
}

/// `rlim_t` is u64 on 64-bit Linux but not on every platform.
#[allow(clippy::unnecessary_cast)]
fn widen(v: libc::rlim_t) -> u64 {
    v as u64
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns (before, after).
/// An unlimited hard limit is capped at the kernel's `nr_open` (1 Mi by default).
pub fn raise_nofile_limit() -> std::io::Result<(u64, u64)> {
    let (soft, hard) = nofile_limit()?;
    let target = if hard == widen(libc::RLIM_INFINITY) {
        std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20)
    } else {
        hard
    };
    if target <= soft {
        return Ok((soft, soft));
    }
    let r = libc::rlimit {
        rlim_cur: target as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((soft, nofile_limit()?.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_the_rule() {
        let b = budget(256, &Overrides::default()).unwrap();
        assert_eq!(b.db_max_open_files, 64);
        // 256 - 64 reserved - 64 RocksDB = 128 for connections.
        assert_eq!(b.raft_connections, 16);
        assert_eq!(b.http_connections, 8);
        assert_eq!(b.grpc_connections, 104);

        let b = budget(1 << 20, &Overrides::default()).unwrap();
        assert_eq!(b.db_max_open_files, MAX_DB_FILES);
        assert_eq!(b.raft_connections, 256);
        assert_eq!(b.http_connections, 64);
        assert_eq!(
            b.grpc_connections as u64,
            (1 << 20) - RESERVED_FDS - MAX_DB_FILES - 256 - 64
        );
    }

    #[test]
    fn every_share_fits_in_the_limit() {
        for limit in [114, 150, 256, 1024, 4096, 65_536, 1 << 20] {
            let b = budget(limit, &Overrides::default()).unwrap();
            let used = RESERVED_FDS
                + b.db_max_open_files
                + (b.grpc_connections + b.raft_connections + b.http_connections) as u64;
            assert!(used <= limit, "{b:?}");
            assert!(b.grpc_connections >= MIN_CONNECTIONS.0, "{b:?}");
        }
    }

    #[test]
    fn too_small_limits_and_oversized_settings_are_refused() {
        assert!(budget(100, &Overrides::default()).is_err());
        let too_many = Overrides {
            grpc_connections: Some(1000),
            ..Overrides::default()
        };
        assert!(budget(256, &too_many).unwrap_err().contains("exceed"));
        let db = Overrides {
            db_max_open_files: Some(300),
            ..Overrides::default()
        };
        assert!(budget(256, &db).is_err());
        let fits = Overrides {
            db_max_open_files: Some(100),
            grpc_connections: Some(50),
            raft_connections: Some(20),
            http_connections: Some(4),
        };
        let b = budget(256, &fits).unwrap();
        assert_eq!(
            (
                b.db_max_open_files,
                b.grpc_connections,
                b.raft_connections,
                b.http_connections
            ),
            (100, 50, 20, 4)
        );
    }
}
