//! How omctl prints: JSON or tables, ISO times, sizes, progress.

use clap::ValueEnum;
use om_client::v1::*;
use serde_json::{Value, json};

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

/// Epoch milliseconds as local ISO-8601 (`2026-11-30T18:52:07.123+01:00`).
pub fn iso_time(ms: u64) -> String {
    use chrono::TimeZone;
    match chrono::Local.timestamp_millis_opt(ms as i64) {
        chrono::LocalResult::Single(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, false),
        _ => ms.to_string(),
    }
}

/// A byte count as people read it: `1.5 MiB`, exact below 1 KiB.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// JSON keeps exact numbers and adds an ISO-8601 string beside each
/// `*_ms` time: `created_ms` gets `created`.
pub fn with_iso_times(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        let times: Vec<(String, u64)> = m
            .iter()
            .filter_map(|(k, v)| Some((k.strip_suffix("_ms")?.to_string(), v.as_u64()?)))
            .filter(|(k, _)| matches!(k.as_str(), "created" | "modified" | "opened" | "initiated"))
            .collect();
        for (k, ms) in times {
            m.insert(k, Value::String(iso_time(ms)));
        }
    }
    v
}

/// How a table shows field `key`: times as local ISO-8601, byte counts
/// human-readable; everything else as it is.
pub fn table_cell(key: &str, v: &Value) -> String {
    match (key, v.as_u64()) {
        (k, Some(ms)) if k.ends_with("_ms") && ms > 0 && !k.starts_with("p") => iso_time(ms),
        (k, Some(n)) if k == "size" || k.ends_with("_bytes") => {
            if k.starts_with("quota") && n == 0 {
                "none".to_string()
            } else {
                human_bytes(n)
            }
        }
        _ => match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        },
    }
}

/// A table header for `key`: `created_ms` shows as CREATED.
pub fn table_header(key: &str) -> String {
    key.strip_suffix("_ms")
        .filter(|k| !k.starts_with('p'))
        .unwrap_or(key)
        .to_uppercase()
}

pub fn volume_json(v: &VolumeInfo) -> Value {
    json!({
        "name": v.name, "owner": v.owner, "quota_bytes": v.quota_bytes,
        "used_bytes": v.used_bytes,
        "quota_buckets": v.quota_namespace, "buckets": v.bucket_count,
        "created_ms": v.creation_time_ms, "modified_ms": v.modification_time_ms,
        "object_id": v.object_id, "update_id": v.update_id, "metadata": v.metadata,
    })
}

pub fn layout_name(l: i32) -> &'static str {
    match BucketLayout::try_from(l) {
        Ok(BucketLayout::FileSystemOptimized) => "FILE_SYSTEM_OPTIMIZED",
        _ => "OBJECT_STORE",
    }
}

pub fn bucket_json(b: &BucketInfo) -> Value {
    json!({
        "volume": b.volume, "name": b.name, "layout": layout_name(b.layout),
        "keys": b.key_count, "used_bytes": b.used_bytes, "open_keys": b.open_key_count,
        "quota_bytes": b.quota_bytes, "used_namespace": b.used_namespace,
        "quota_namespace": b.quota_namespace,
        "versioning": crate::versions::versioning_name(b.versioning),
        "created_ms": b.creation_time_ms, "modified_ms": b.modification_time_ms,
        "object_id": b.object_id, "update_id": b.update_id, "metadata": b.metadata,
        "owner": b.owner, "tags": b.tags,
    })
}

pub fn key_json(k: &KeyInfo) -> Value {
    json!({
        "volume": k.volume, "bucket": k.bucket, "name": k.name, "size": k.size,
        "etag": k.etag, "content_type": k.content_type, "metadata": k.metadata,
        "blocks": k.blocks.iter().map(|b| json!({"id": b.block_id, "offset": b.offset, "length": b.length})).collect::<Vec<_>>(),
        "created_ms": k.creation_time_ms, "modified_ms": k.modification_time_ms,
        "object_id": k.object_id, "update_id": k.update_id,
        "version_id": k.version_id, "delete_marker": k.delete_marker, "is_latest": k.is_latest,
        "tag_count": k.tag_count,
    })
}

/// Prints rows as an aligned table.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r);
    }
}

pub fn print_kv(out: Output, v: Value) {
    if out == Output::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(&with_iso_times(v)).unwrap_or_default()
        );
        return;
    }
    if let Value::Object(m) = v {
        let shown: Vec<(String, String)> = m
            .iter()
            .map(|(k, v)| {
                let name = k
                    .strip_suffix("_ms")
                    .filter(|_| v.as_u64().is_some_and(|n| n > 0))
                    .unwrap_or(k);
                (name.to_string(), table_cell(k, v))
            })
            .collect();
        let w = shown.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, s) in shown {
            println!("{k:<w$}  {s}");
        }
    }
}

pub fn print_list(out: Output, items: Vec<Value>, cols: &[&str], next: &str, truncated: bool) {
    if out == Output::Json {
        let items: Vec<Value> = items.into_iter().map(with_iso_times).collect();
        let v = json!({"items": items, "truncated": truncated, "next_start_after": next});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    let rows = items
        .iter()
        .map(|i| cols.iter().map(|c| table_cell(c, &i[*c])).collect())
        .collect();
    table(
        &cols
            .iter()
            .map(|c| table_header(c))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        rows,
    );
    if truncated {
        println!("-- more: --start-after {next:?}");
    }
}

pub struct Progress {
    on: bool,
    started: std::time::Instant,
    what: &'static str,
}

impl Progress {
    pub fn new(enabled: bool, what: &'static str) -> Progress {
        use std::io::IsTerminal;
        Progress {
            on: enabled && std::io::stderr().is_terminal(),
            started: std::time::Instant::now(),
            what,
        }
    }

    pub fn update(&self, n: usize) {
        if self.on {
            let secs = self.started.elapsed().as_secs_f64().max(1e-3);
            eprint!("\r{n} {} ({:.0}/s)\x1b[K", self.what, n as f64 / secs);
        }
    }

    pub fn done(&self) {
        if self.on {
            eprint!("\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_show_times_and_sizes_for_people_and_json_keeps_numbers() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 40), "5.0 TiB");
        assert_eq!(table_cell("quota_bytes", &json!(0)), "none");
        assert_eq!(table_cell("size", &json!(2048)), "2.0 KiB");
        assert_eq!(table_cell("etag", &json!("abc")), "abc");
        let t = table_cell("created_ms", &json!(1_796_060_000_123u64));
        assert!(
            t.starts_with("2026-11-30T") || t.starts_with("2026-12-01T"),
            "{t}"
        );
        assert!(t.contains(".123"), "{t}");
        assert_eq!(table_header("created_ms"), "CREATED");
        assert_eq!(table_header("p99_ms"), "P99_MS");
        let v = with_iso_times(json!({"created_ms": 0u64, "size": 5}));
        assert_eq!(v["created_ms"], 0);
        // Local time of the epoch: 1970-01-01 or 1969-12-31 by time zone.
        assert!(v["created"].as_str().unwrap().starts_with("19"), "{v}");
        assert_eq!(v["size"], 5);
    }
}
