//! `omctl backup`: take, list, verify and prune backups (`om_client::backup`).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Result;
use clap::Subcommand;
use om_client::OmClient;
use om_client::backup::{self, CreateOptions, Manifest, Progress};
use serde_json::json;

use crate::Output;

#[derive(Subcommand)]
pub enum BackupCmd {
    /// Takes a backup from the (first) endpoint's member, online, into the
    /// directory DEST: files earlier backups in DEST hold are shared, not
    /// copied again. Prints the backup's id. Needs an admin.
    Create {
        dest: PathBuf,
        /// Most MiB per second read from the member [default: its
        /// --backup-rate, which also caps this].
        #[arg(long)]
        rate_mib: Option<u64>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// Signs the manifest (`manifest.mac`, HMAC-SHA256) under the first
        /// key of this file (`ID HEX` lines; `omctl s3 secret new-key ID`
        /// makes one); `verify` and `om restore` given it refuse a backup
        /// altered since.
        #[arg(long, env = "OM_BACKUP_KEY_FILE")]
        backup_key_file: Option<PathBuf>,
    },
    /// Lists the complete backups in DEST, oldest first.
    List { dest: PathBuf },
    /// Re-reads every byte of a backup (DEST/ID, or DEST for its newest)
    /// and checks it against the manifest's digests; with a backup key,
    /// first the manifest against its tag (refused when it has none).
    Verify {
        backup: PathBuf,
        #[arg(long, env = "OM_BACKUP_KEY_FILE")]
        backup_key_file: Option<PathBuf>,
    },
    /// Keeps the newest N backups in DEST and removes the rest, with the
    /// files only they used.
    Prune {
        dest: PathBuf,
        #[arg(long)]
        keep: usize,
    },
    /// Copies the backups in DEST that are not there yet to an object store
    /// (s3://BUCKET/PREFIX, gs://, az://; credentials and endpoint from the
    /// environment, as om-s3's --blocks), objects first, each once, the
    /// manifest last; with --keep, then keeps the newest N backups there.
    Copy {
        dest: PathBuf,
        url: String,
        #[arg(long)]
        keep: Option<usize>,
    },
}

fn summary(m: &Manifest) -> serde_json::Value {
    json!({
        "id": m.id,
        "created": m.created,
        "cluster_id": m.cluster_id,
        "node_id": m.node_id,
        "applied_index": m.applied_index,
        "applied_term": m.applied_term,
        "members": m.members.iter().map(|x| x.node_id).collect::<Vec<_>>(),
        "files": m.files.len(),
        "bytes": m.bytes,
        "new_bytes": m.new_bytes,
        "tables": m.tables.iter().map(|t| json!({"name": t.name, "entries": t.entries, "sha256": t.sha256})).collect::<Vec<_>>(),
    })
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// A progress bar on a terminal, a line every 10 s elsewhere.
struct Bar {
    started: Instant,
    last: Mutex<Instant>,
    tty: bool,
}

impl Bar {
    fn show(&self, p: &Progress) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let every = if self.tty { 0.2 } else { 10.0 };
        let done = p.done_bytes >= p.total_bytes;
        if last.elapsed().as_secs_f64() < every && !done {
            return;
        }
        *last = Instant::now();
        let pct = if p.total_bytes == 0 {
            100.0
        } else {
            p.done_bytes as f64 * 100.0 / p.total_bytes as f64
        };
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = mib(p.done_bytes - p.reused_bytes) / secs;
        let line = format!(
            "{pct:5.1}% {:.1}/{:.1} MiB ({:.1} MiB shared with earlier backups) {rate:.1} MiB/s",
            mib(p.done_bytes),
            mib(p.total_bytes),
            mib(p.reused_bytes)
        );
        let mut err = std::io::stderr();
        if self.tty {
            let filled = (pct / 5.0) as usize;
            let _ = write!(
                err,
                "\r[{}{}] {line}",
                "#".repeat(filled),
                " ".repeat(20usize.saturating_sub(filled))
            );
        } else {
            let _ = writeln!(err, "backup: {line}");
        }
    }
}

pub async fn run(c: &OmClient, out: Output, cmd: BackupCmd) -> Result<()> {
    match cmd {
        BackupCmd::Create {
            dest,
            rate_mib,
            quiet,
            backup_key_file,
        } => {
            let keys = backup_keys(backup_key_file.as_deref())?;
            let bar = Bar {
                started: Instant::now(),
                last: Mutex::new(Instant::now()),
                tty: std::io::stderr().is_terminal(),
            };
            let show: &(dyn Fn(&Progress) + Sync) = &|p| bar.show(p);
            let m = backup::create(
                c,
                &dest,
                CreateOptions {
                    bytes_per_second: rate_mib.map_or(0, |r| r.max(1) << 20),
                    progress: (!quiet).then_some(show),
                    keys: keys.as_ref(),
                },
            )
            .await?;
            if bar.tty && !quiet {
                eprintln!();
            }
            match out {
                Output::Json => println!("{}", serde_json::to_string_pretty(&summary(&m))?),
                Output::Table => {
                    eprintln!(
                        "backup {} at index {} (term {}) from node {}: {} files, {:.1} MiB, \
                         {:.1} MiB new, in {:.1} s",
                        m.id,
                        m.applied_index,
                        m.applied_term,
                        m.node_id,
                        m.files.len(),
                        mib(m.bytes),
                        mib(m.new_bytes),
                        bar.started.elapsed().as_secs_f64()
                    );
                    println!("{}", m.id);
                }
            }
        }
        BackupCmd::List { dest } => {
            let all = backup::list(&dest)?;
            match out {
                Output::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&all.iter().map(summary).collect::<Vec<_>>())?
                ),
                Output::Table => {
                    println!(
                        "{:<36} {:>12} {:>6} {:>5} {:>10} {:>10}  CLUSTER",
                        "ID", "INDEX", "TERM", "NODE", "MIB", "NEW MIB"
                    );
                    for m in &all {
                        println!(
                            "{:<36} {:>12} {:>6} {:>5} {:>10.1} {:>10.1}  {}",
                            m.id,
                            m.applied_index,
                            m.applied_term,
                            m.node_id,
                            mib(m.bytes),
                            mib(m.new_bytes),
                            m.cluster_id
                        );
                    }
                }
            }
        }
        BackupCmd::Verify {
            backup: path,
            backup_key_file,
        } => verify(
            &path,
            backup_keys(backup_key_file.as_deref())?.as_ref(),
            out,
        )?,
        BackupCmd::Copy { dest, url, keep } => {
            let r = crate::backup_copy::copy(&dest, &url, keep).await?;
            match out {
                Output::Json => println!(
                    "{}",
                    json!({
                        "copied": r.backups,
                        "objects": r.objects,
                        "bytes": r.bytes,
                        "reused": r.reused,
                        "removed": r.removed,
                        "removed_objects": r.removed_objects,
                    })
                ),
                Output::Table => println!(
                    "copied {} backups: {} files sent ({:.1} MiB), {} already there; removed {} \
                     backups and {} files there",
                    r.backups.len(),
                    r.objects,
                    mib(r.bytes),
                    r.reused,
                    r.removed.len(),
                    r.removed_objects
                ),
            }
        }
        BackupCmd::Prune { dest, keep } => {
            let p = backup::prune(&dest, keep)?;
            match out {
                Output::Json => println!(
                    "{}",
                    json!({"removed": p.backups, "objects": p.objects, "bytes": p.bytes})
                ),
                Output::Table => println!(
                    "removed {} backups and {} files ({:.1} MiB)",
                    p.backups.len(),
                    p.objects,
                    mib(p.bytes)
                ),
            }
        }
    }
    Ok(())
}

fn backup_keys(path: Option<&Path>) -> Result<Option<backup::MacKeys>> {
    path.map(|p| backup::MacKeys::load(p).map_err(anyhow::Error::msg))
        .transpose()
}

fn verify(path: &Path, keys: Option<&backup::MacKeys>, out: Output) -> Result<()> {
    let (dest, m) = backup::resolve(path)?;
    let signed = match keys {
        Some(k) => Some(backup::authenticate(&dest.join(&m.id), k)?),
        None => None,
    };
    let v = backup::verify(&dest, &m)?;
    match out {
        Output::Json => println!(
            "{}",
            json!({"id": m.id, "ok": true, "files": v.files, "bytes": v.bytes,
                "signed_by": signed})
        ),
        Output::Table => println!(
            "backup {} is whole{}: {} files, {:.1} MiB read back",
            m.id,
            signed.map_or(String::new(), |k| format!(" and signed under key {k}")),
            v.files,
            mib(v.bytes)
        ),
    }
    Ok(())
}
