//! `omctl backup copy DEST URL`: an off-site copy of the backups in the
//! directory DEST in an object store (`s3://`, `gs://`, `az://`, through
//! `object_store`, configured from the environment as om-s3's block store
//! is), with retention.
//!
//! The copy keeps DEST's layout and its order: a backup's objects
//! (`PREFIX/objects/SHA256`) go first, each once (one another backup already
//! copied is not sent again), its manifest (`PREFIX/ID/manifest.json`) last,
//! so a manifest there never names a missing object and a backup whose
//! manifest is there is complete and is skipped. Retention (`--keep N`)
//! removes the manifests of all but the newest N backups there first, then
//! the objects no kept manifest names. Restore from the copy by copying it
//! back into a directory (any tool: `rclone copy`, `aws s3 sync`) and
//! running `omctl backup verify` and `om restore` on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use om_client::backup::{self, MANIFEST, Manifest, OBJECTS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Part size of an object's multipart upload.
const PART: usize = 8 << 20;

/// What one copy did.
#[derive(Debug, Default)]
pub struct Copied {
    /// Backups copied now (their manifests written).
    pub backups: Vec<String>,
    /// Objects sent, and their bytes.
    pub objects: usize,
    pub bytes: u64,
    /// Objects already there.
    pub reused: usize,
    /// Backups removed there by retention, and the objects only they named.
    pub removed: Vec<String>,
    pub removed_objects: usize,
}

/// The store and prefix `url` names.
fn open(url: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    use object_store::aws::AmazonS3Builder;
    use object_store::azure::MicrosoftAzureBuilder;
    use object_store::gcp::GoogleCloudStorageBuilder;
    // The HTTP client's TLS uses the process's provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let parsed = url::Url::parse(url).with_context(|| format!("{url}: not a URL"))?;
    let store: Arc<dyn ObjectStore> = match parsed.scheme() {
        "s3" => Arc::new(AmazonS3Builder::from_env().with_url(url).build()?),
        "gs" => Arc::new(
            GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .build()?,
        ),
        "az" => Arc::new(MicrosoftAzureBuilder::from_env().with_url(url).build()?),
        other => bail!("{url}: no object store for scheme {other:?} (s3://, gs:// or az://)"),
    };
    let prefix =
        ObjectPath::from_url_path(parsed.path()).with_context(|| format!("{url}: a bad prefix"))?;
    Ok((store, prefix))
}

/// Sends the file `from` to `to`, in parts past `PART`.
async fn upload(store: &Arc<dyn ObjectStore>, from: &Path, to: ObjectPath) -> Result<u64> {
    let mut f = tokio::fs::File::open(from)
        .await
        .with_context(|| format!("reading {}", from.display()))?;
    let mut w = BufWriter::with_capacity(store.clone(), to.clone(), PART).with_max_concurrency(2);
    let mut n = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    let sent: Result<()> = async {
        loop {
            let k = f.read(&mut buf).await?;
            if k == 0 {
                return Ok(());
            }
            n += k as u64;
            w.write_all(&buf[..k]).await?;
        }
    }
    .await;
    if let Err(e) = sent {
        let _ = w.abort().await;
        return Err(e.context(format!("sending {} to {to}", from.display())));
    }
    w.shutdown()
        .await
        .with_context(|| format!("completing {to}"))?;
    Ok(n)
}

/// The manifests under `prefix`, by backup id.
async fn remote_manifests(
    store: &Arc<dyn ObjectStore>,
    prefix: &ObjectPath,
) -> Result<BTreeMap<String, Manifest>> {
    let listed = store.list_with_delimiter(Some(prefix)).await?;
    let mut out = BTreeMap::new();
    for dir in listed.common_prefixes {
        let Some(id) = dir.filename().map(str::to_string) else {
            continue;
        };
        if id == OBJECTS {
            continue;
        }
        let at = dir.clone().join(MANIFEST);
        let bytes = match store.get(&at).await {
            Ok(r) => r.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        if bytes.len() as u64 > backup::MAX_MANIFEST_BYTES {
            bail!("{at} is larger than {} bytes", backup::MAX_MANIFEST_BYTES);
        }
        let m: Manifest =
            serde_json::from_slice(&bytes).with_context(|| format!("{at} does not parse"))?;
        out.insert(id, m);
    }
    Ok(out)
}

/// Copies every complete backup in `dest` that is not at `url` yet, then
/// keeps the newest `keep` there (all, when `None`).
pub async fn copy(dest: &Path, url: &str, keep: Option<usize>) -> Result<Copied> {
    if keep == Some(0) {
        bail!("--keep must be at least 1: retention never removes every backup");
    }
    let (store, prefix) = open(url)?;
    let local = backup::list(dest)?;
    let objects_at = prefix.clone().join(OBJECTS);
    let mut there: BTreeMap<String, u64> = store
        .list(Some(&objects_at))
        .map_ok(|m| {
            (
                m.location.filename().unwrap_or_default().to_string(),
                m.size,
            )
        })
        .try_collect()
        .await
        .with_context(|| format!("listing {url}"))?;
    let copied_before = remote_manifests(&store, &prefix).await?;
    let mut out = Copied::default();
    for m in &local {
        if copied_before.contains_key(&m.id) {
            continue;
        }
        for f in &m.files {
            if there.get(&f.sha256) == Some(&f.bytes) {
                out.reused += 1;
                continue;
            }
            let from = dest.join(OBJECTS).join(&f.sha256);
            let n = upload(&store, &from, objects_at.clone().join(f.sha256.as_str())).await?;
            if n != f.bytes {
                bail!(
                    "{} holds {n} bytes, the manifest of {} says {}",
                    from.display(),
                    m.id,
                    f.bytes
                );
            }
            there.insert(f.sha256.clone(), n);
            out.objects += 1;
            out.bytes += n;
        }
        // Its tag, if it has one, before the manifest.
        if let Ok(tag) = std::fs::read(dest.join(&m.id).join(backup::MANIFEST_MAC)) {
            store
                .put(
                    &prefix
                        .clone()
                        .join(m.id.as_str())
                        .join(backup::MANIFEST_MAC),
                    PutPayload::from(tag),
                )
                .await
                .with_context(|| format!("writing the manifest tag of {}", m.id))?;
        }
        // The manifest last: the backup exists there once it does.
        let text = std::fs::read(dest.join(&m.id).join(MANIFEST))
            .with_context(|| format!("reading the manifest of {}", m.id))?;
        store
            .put(
                &prefix.clone().join(m.id.as_str()).join(MANIFEST),
                PutPayload::from(text),
            )
            .await
            .with_context(|| format!("writing the manifest of {}", m.id))?;
        out.backups.push(m.id.clone());
    }
    if let Some(keep) = keep {
        let all = remote_manifests(&store, &prefix).await?;
        let cut = all.len().saturating_sub(keep);
        for (id, _) in all.iter().take(cut) {
            // The manifest first: a backup without one no longer exists.
            store
                .delete(&prefix.clone().join(id.as_str()).join(MANIFEST))
                .await
                .with_context(|| format!("removing the manifest of {id}"))?;
            let tag = prefix.clone().join(id.as_str()).join(backup::MANIFEST_MAC);
            match store.delete(&tag).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("removing the manifest tag of {id}"));
                }
            }
            out.removed.push(id.clone());
        }
        let kept: BTreeSet<&str> = all
            .values()
            .skip(cut)
            .flat_map(|m| m.files.iter().map(|f| f.sha256.as_str()))
            .collect();
        for name in there.keys() {
            if !kept.contains(name.as_str()) {
                store
                    .delete(&objects_at.clone().join(name.as_str()))
                    .await
                    .with_context(|| format!("removing object {name}"))?;
                out.removed_objects += 1;
            }
        }
    }
    Ok(out)
}
