//! The memory budget RocksDB gets (`--memory-budget`): parsed from a size,
//! or taken from the cgroup's memory limit.

/// The smallest budget accepted.
pub const MIN_BUDGET: u64 = 64 << 20;
/// The budget without a cgroup limit.
pub const DEFAULT_WITHOUT_LIMIT: u64 = 1 << 30;
/// The share of the cgroup limit RocksDB gets by default: the rest is for
/// the process (Raft's tail cache, gRPC buffers, snapshot transfers,
/// pinned blocks) and the page cache of the SST files.
pub const LIMIT_PERCENT: u64 = 40;

/// Parses `1073741824`, `512MiB`, `2GiB`, `1.5G` (K/M/G/T with or without
/// `i`/`B`: powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size such as 2GiB or 512MiB"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "ki" | "kb" | "kib" => 10,
        "m" | "mi" | "mb" | "mib" => 20,
        "g" | "gi" | "gb" | "gib" => 30,
        "t" | "ti" | "tb" | "tib" => 40,
        u => return Err(format!("unknown unit {u:?} in {s:?}")),
    };
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// The cgroup's memory limit (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), if there is one.
pub fn cgroup_limit() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    if let Some(v) = read("/sys/fs/cgroup/memory.max") {
        return v.trim().parse().ok();
    }
    let v: u64 = read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?
        .trim()
        .parse()
        .ok()?;
    // v1 reports "no limit" as a page-rounded i64::MAX.
    (v < 1 << 60).then_some(v)
}

/// `LIMIT_PERCENT` of the cgroup limit, or `DEFAULT_WITHOUT_LIMIT`.
pub fn default_budget() -> u64 {
    cgroup_limit()
        .map(|l| (l / 100 * LIMIT_PERCENT).max(MIN_BUDGET))
        .unwrap_or(DEFAULT_WITHOUT_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_bytes("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("2G").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("1.5gb").unwrap(), 3 << 29);
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("").is_err());
    }
}
