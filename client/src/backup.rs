//! Taking a backup from a running member into a backup directory, whose
//! format (`om_backup_format`) is re-exported here.
//!
//! Incremental: a member's SST files never change once written, and a
//! store's files are named by number, never reused; so a file of the same
//! store identity, name and size as one an earlier backup in `DEST` holds is
//! that file, and is not transferred again.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

pub use om_backup_format::keys::MacKeys;
pub use om_backup_format::{
    FORMAT, FileEntry, FormatError, MANIFEST, MANIFEST_MAC, MAX_MANIFEST_BYTES, Manifest, Member,
    OBJECTS, Pruned, Table, Verified, authenticate, hash_file, list, prune, read_manifest, resolve,
    table_digests, verify,
};
use om_backup_format::{TMP_PREFIX, lock, reusable, safe_name, sync_dir, write_manifest};
use om_proto::v1::cluster_client::ClusterClient;
use om_proto::v1::{FinishBackupRequest, ReadBackupFileRequest, StartBackupRequest};
use ring::digest::{Context, SHA256};

use crate::{ClientError, OmClient};

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    /// The backup is damaged or incomplete; nothing was restored from it.
    #[error("{0}")]
    Invalid(String),
}

impl From<FormatError> for BackupError {
    fn from(e: FormatError) -> Self {
        match e {
            FormatError::Io { what, err } => BackupError::Io { what, err },
            FormatError::Invalid(s) => BackupError::Invalid(s),
        }
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let what = what.into();
    move |err| BackupError::Io { what, err }
}

/// How far a backup has come.
#[derive(Debug, Clone)]
pub struct Progress {
    pub done_bytes: u64,
    pub total_bytes: u64,
    /// Bytes reused from earlier backups (counted in `done_bytes`).
    pub reused_bytes: u64,
}

/// Options of `create`.
pub struct CreateOptions<'a> {
    /// Read rate asked of the server (0: its default, at most its cap).
    pub bytes_per_second: u64,
    pub progress: Option<&'a (dyn Fn(&Progress) + Sync)>,
    /// Signs the manifest (`manifest.mac`) under the first key.
    pub keys: Option<&'a MacKeys>,
}

/// How long the server may take to copy and describe its store.
const START_TIMEOUT: Duration = Duration::from_secs(3600);
/// Longest silence within one file's stream.
const CHUNK_TIMEOUT: Duration = Duration::from_secs(120);
/// Attempts per file.
const FILE_ATTEMPTS: u32 = 3;

/// Takes a backup from the member `client` talks to (its first endpoint)
/// into `dest`, reusing files earlier backups there hold.
pub async fn create(
    client: &OmClient,
    dest: &Path,
    opts: CreateOptions<'_>,
) -> Result<Manifest, BackupError> {
    let _lock = lock(dest)?;
    let known = reusable(dest)?;
    let ch = client.pick().1;
    let mut cluster = ClusterClient::new(ch).max_decoding_message_size(16 << 20);
    let started = tokio::time::timeout(START_TIMEOUT, cluster.start_backup(StartBackupRequest {}))
        .await
        .map_err(|_| ClientError::Unavailable("the copy was not taken within an hour".into()))?
        .map_err(|s| ClientError::from_status(&s))?
        .into_inner();
    let result = transfer(&mut cluster, dest, &known, &started, &opts).await;
    // Released either way; a copy left behind is released when idle.
    let _ = tokio::time::timeout(
        Duration::from_secs(30),
        cluster.finish_backup(FinishBackupRequest {
            session: started.session.clone(),
        }),
    )
    .await;
    let (files, new_bytes) = result?;
    let now = chrono::Utc::now();
    let mut id = format!(
        "{}-{:012}",
        now.format("%Y%m%dT%H%M%SZ"),
        started.applied_index
    );
    let mut n = 1;
    while dest.join(&id).exists() {
        n += 1;
        id = format!(
            "{}-{:012}-{n}",
            now.format("%Y%m%dT%H%M%SZ"),
            started.applied_index
        );
    }
    let m = Manifest {
        format: FORMAT,
        id: id.clone(),
        created: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        cluster_id: started.cluster_id,
        node_id: started.node_id,
        applied_index: started.applied_index,
        applied_term: started.applied_term,
        applied_leader: started.applied_leader,
        time_ms: started.time_ms,
        members: started
            .members
            .into_iter()
            .map(|m| Member {
                node_id: m.node_id,
                raft_addr: m.raft_addr,
                grpc_addr: m.grpc_addr,
                voter: m.voter,
            })
            .collect(),
        tables: started
            .tables
            .into_iter()
            .map(|t| Table {
                name: t.table,
                entries: t.entries,
                sha256: t.digest,
            })
            .collect(),
        store_identity: started.store_identity,
        bytes: files.iter().map(|f| f.bytes).sum(),
        files,
        new_bytes,
    };
    write_manifest(dest, &m, opts.keys)?;
    Ok(m)
}

type Cluster = ClusterClient<crate::AuthChannel>;

/// Fetches the files `started` lists that `known` does not hold; returns
/// every file's entry and the bytes transferred.
async fn transfer(
    cluster: &mut Cluster,
    dest: &Path,
    known: &HashMap<(String, String, u64), String>,
    started: &om_proto::v1::StartBackupResponse,
    opts: &CreateOptions<'_>,
) -> Result<(Vec<FileEntry>, u64), BackupError> {
    let objects = dest.join(OBJECTS);
    let mut progress = Progress {
        done_bytes: 0,
        total_bytes: started.files.iter().map(|f| f.bytes).sum(),
        reused_bytes: 0,
    };
    let mut out = Vec::with_capacity(started.files.len());
    let mut new_bytes = 0;
    for f in &started.files {
        if !safe_name(&f.name) {
            return Err(BackupError::Invalid(format!(
                "the server listed a bad file name {:?}",
                f.name
            )));
        }
        let key = (started.store_identity.clone(), f.name.clone(), f.bytes);
        let sha = match known.get(&key) {
            Some(sha) => {
                progress.reused_bytes += f.bytes;
                progress.done_bytes += f.bytes;
                sha.clone()
            }
            None => {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let before = progress.done_bytes;
                    match fetch(cluster, &objects, started, f, opts, &mut progress).await {
                        Ok(sha) => break sha,
                        Err(e) if attempt < FILE_ATTEMPTS && retryable(&e) => {
                            tracing::warn!(file = %f.name, error = %e, "retrying a backup file");
                            progress.done_bytes = before;
                            tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt)))
                                .await;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        };
        if known.get(&key).is_none() {
            new_bytes += f.bytes;
        }
        out.push(FileEntry {
            name: f.name.clone(),
            bytes: f.bytes,
            sha256: sha,
        });
        if let Some(p) = opts.progress {
            p(&progress);
        }
    }
    sync_dir(&objects)?;
    Ok((out, new_bytes))
}

fn retryable(e: &BackupError) -> bool {
    match e {
        BackupError::Client(ClientError::Api { code, .. }) => {
            matches!(
                code,
                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal
            )
        }
        BackupError::Client(ClientError::Unavailable(_)) => true,
        _ => false,
    }
}

/// Streams one file into `objects` under its digest.
async fn fetch(
    cluster: &mut Cluster,
    objects: &Path,
    started: &om_proto::v1::StartBackupResponse,
    f: &om_proto::v1::BackupFile,
    opts: &CreateOptions<'_>,
    progress: &mut Progress,
) -> Result<String, BackupError> {
    let tmp = objects.join(format!("{TMP_PREFIX}{}-{}", started.session, f.name));
    let mut out = om_backup_format::private_file(&tmp)?;
    let mut stream = cluster
        .read_backup_file(ReadBackupFileRequest {
            session: started.session.clone(),
            name: f.name.clone(),
            bytes_per_second: opts.bytes_per_second,
        })
        .await
        .map_err(|s| ClientError::from_status(&s))?
        .into_inner();
    let mut ctx = Context::new(&SHA256);
    let mut got = 0u64;
    let mut theirs = None;
    loop {
        let next = tokio::time::timeout(CHUNK_TIMEOUT, stream.message())
            .await
            .map_err(|_| ClientError::Unavailable(format!("{} stalled", f.name)))?
            .map_err(|s| ClientError::from_status(&s))?;
        let Some(chunk) = next else { break };
        got += chunk.data.len() as u64;
        if got > f.bytes {
            return Err(BackupError::Invalid(format!(
                "{}: the server sent more than its {} bytes",
                f.name, f.bytes
            )));
        }
        ctx.update(&chunk.data);
        out.write_all(&chunk.data)
            .map_err(io(format!("writing {}", tmp.display())))?;
        progress.done_bytes += chunk.data.len() as u64;
        if let Some(p) = opts.progress {
            p(progress);
        }
        if !chunk.sha256.is_empty() {
            theirs = Some(chunk.sha256);
            break;
        }
    }
    let sha = hex::encode(ctx.finish().as_ref());
    if got != f.bytes || theirs.as_deref() != Some(sha.as_str()) {
        let _ = fs::remove_file(&tmp);
        return Err(ClientError::Unavailable(format!(
            "{}: {got} of {} bytes arrived, or their digest differs from the server's",
            f.name, f.bytes
        ))
        .into());
    }
    out.sync_all()
        .map_err(io(format!("writing {}", tmp.display())))?;
    drop(out);
    fs::rename(&tmp, objects.join(&sha)).map_err(io(format!("writing {}", tmp.display())))?;
    Ok(sha)
}
