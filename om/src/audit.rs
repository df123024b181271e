//! The audit log: one JSON line per mutation and per refused request (time,
//! node, request id, principal, the user it acted for, operation, resource,
//! result), written by its own thread so a request only queues its record.
//!
//! Refusals (failed authentication, missing rights, refused impersonation)
//! go to a file of their own, `PATH.refused`, rotated the same way: anyone
//! who can reach the port can cause them, and they must never push the
//! record of a mutation out of the kept files.
//!
//! The file is rotated by size: past `max_bytes` it is renamed to `PATH.1`
//! (older ones shift to `PATH.2` ... `PATH.KEEP`, the oldest dropped) and a
//! new one started. When the queue is full (the disk cannot keep up) a
//! record is dropped and counted in `om_audit_dropped_total` rather than
//! delaying requests.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// Records queued before new ones are dropped.
pub const QUEUE: usize = 65_536;

/// One audited event.
#[derive(Debug, Clone, Default)]
pub struct Event {
    pub time_ms: u64,
    pub request_id: String,
    /// The authenticated principal ("anonymous" without authentication).
    pub principal: String,
    /// How it authenticated: certificate, token or none.
    pub via: &'static str,
    /// The user the request acted for, when the principal impersonated one.
    pub impersonated_user: String,
    pub operation: String,
    pub resource: String,
    /// `OK`, or the refusal's reason (e.g. `ACCESS_DENIED`).
    pub result: String,
    /// Set on ACCESS_DENIED: the missing right.
    pub right: String,
    /// What else the action did, e.g. a lifecycle page's counts by rule.
    pub detail: String,
    /// A refused request: written to the refusals file.
    pub refusal: bool,
}

/// Where audit events go.
pub struct AuditLog {
    tx: SyncSender<Event>,
}

impl AuditLog {
    /// Appends to `path` (created if absent), rotating past `max_bytes` and
    /// keeping `keep` rotated files.
    pub fn open(path: &Path, max_bytes: u64, keep: u32, node_id: u64) -> io::Result<AuditLog> {
        let mut main = Writer::open(path.to_path_buf(), max_bytes, keep, node_id)?;
        let mut refused = Writer::open(refusals_path(path), max_bytes, keep, node_id)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("om-audit".to_string())
            .spawn(move || run(rx, &mut main, &mut refused))?;
        Ok(AuditLog { tx })
    }

    /// Queues `e`; never blocks.
    pub fn record(&self, e: Event) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(e) {
            metrics::counter!("om_audit_dropped_total").increment(1);
        }
    }
}

/// Where the refusals of the log at `path` go.
pub fn refusals_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".refused");
    PathBuf::from(p)
}

/// Opens for appending; a new file is readable by its owner only.
fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

fn run(rx: Receiver<Event>, main: &mut Writer, refused: &mut Writer) {
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(e) = next {
            let w = if e.refusal { &mut *refused } else { &mut *main };
            if let Err(err) = w.write(&e) {
                metrics::counter!("om_audit_write_errors_total").increment(1);
                tracing::error!(error = %err, path = %w.path.display(), "audit log write failed");
            }
            next = rx.try_recv().ok();
        }
        for w in [&mut *main, &mut *refused] {
            if let Err(err) = w.out.flush() {
                tracing::error!(error = %err, path = %w.path.display(), "audit log flush failed");
            }
        }
    }
    let _ = main.out.flush();
    let _ = refused.out.flush();
}

struct Writer {
    path: PathBuf,
    out: BufWriter<File>,
    size: u64,
    max_bytes: u64,
    keep: u32,
    node_id: u64,
}

impl Writer {
    fn open(path: PathBuf, max_bytes: u64, keep: u32, node_id: u64) -> io::Result<Writer> {
        let file = open_append(&path)?;
        // A file from before (or created under a looser umask) too.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let size = file.metadata()?.len();
        Ok(Writer {
            path,
            out: BufWriter::new(file),
            size,
            max_bytes: max_bytes.max(1),
            keep,
            node_id,
        })
    }

    fn write(&mut self, e: &Event) -> io::Result<()> {
        let line = line(self.node_id, e);
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.out.write_all(line.as_bytes())?;
        self.size += line.len() as u64;
        metrics::counter!("om_audit_events_total").increment(1);
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        let numbered = |n: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            for n in (1..self.keep).rev() {
                let from = numbered(n);
                if from.exists() {
                    std::fs::rename(&from, numbered(n + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        self.out = BufWriter::new(open_append(&self.path)?);
        self.size = 0;
        Ok(())
    }
}

/// `e` as one JSON line.
pub fn line(node_id: u64, e: &Event) -> String {
    let mut s = String::with_capacity(256);
    s.push_str("{\"time\":\"");
    s.push_str(&rfc3339_ms(e.time_ms));
    s.push_str(&format!("\",\"node\":{node_id}"));
    for (k, v) in [
        ("request_id", e.request_id.as_str()),
        ("principal", e.principal.as_str()),
        ("via", e.via),
        ("impersonated_user", e.impersonated_user.as_str()),
        ("operation", e.operation.as_str()),
        ("resource", e.resource.as_str()),
        ("result", e.result.as_str()),
        ("right", e.right.as_str()),
        ("detail", e.detail.as_str()),
    ] {
        if v.is_empty() && matches!(k, "impersonated_user" | "right" | "detail") {
            continue;
        }
        s.push_str(",\"");
        s.push_str(k);
        s.push_str("\":");
        json_string(&mut s, v);
    }
    s.push_str("}\n");
    s
}

fn json_string(out: &mut String, v: &str) {
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_007), "2000-02-29T00:00:00.007Z");
        assert_eq!(rfc3339_ms(1_796_060_000_123), "2026-11-30T17:33:20.123Z");
    }

    #[test]
    fn lines_are_one_json_object_with_escaped_values() {
        let l = line(
            3,
            &Event {
                time_ms: 0,
                request_id: "r1".into(),
                principal: "gw".into(),
                via: "certificate",
                impersonated_user: "al\"ice\n".into(),
                operation: "PutKey".into(),
                resource: "/v/b/k".into(),
                result: "OK".into(),
                ..Event::default()
            },
        );
        assert!(l.ends_with("}\n") && l.matches('\n').count() == 1, "{l}");
        assert!(l.contains(r#""impersonated_user":"al\"ice\n""#), "{l}");
        assert!(l.contains(r#""node":3"#) && !l.contains("right"), "{l}");
    }

    #[test]
    fn the_file_rotates_by_size_and_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path, 400, 2, 1).unwrap();
        for i in 0..40 {
            log.record(Event {
                time_ms: i,
                request_id: format!("req-{i}"),
                principal: "p".into(),
                via: "token",
                operation: "PutKey".into(),
                resource: "/v/b/k".into(),
                result: "OK".into(),
                ..Event::default()
            });
        }
        drop(log);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let last = loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains("\"req-39\"") {
                break text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "last event never written"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert!(last.len() <= 400, "{}", last.len());
        let one = std::fs::read_to_string(dir.path().join("audit.log.1")).unwrap();
        let two = std::fs::read_to_string(dir.path().join("audit.log.2")).unwrap();
        assert!(one.len() <= 400 && two.len() <= 400);
        assert!(!dir.path().join("audit.log.3").exists());
        // The newest files hold a contiguous tail of the events.
        let ids: Vec<u64> = [two, one, last]
            .concat()
            .lines()
            .map(|l| {
                let at = l.find("\"req-").unwrap() + 5;
                l[at..].split('"').next().unwrap().parse().unwrap()
            })
            .collect();
        assert_eq!(*ids.last().unwrap(), 39);
        assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    }
}
