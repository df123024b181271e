//! Object data. om keeps every key's metadata and names its data as blocks
//! (ids om allocates); the gateway keeps the bytes of those blocks in a
//! `BlockStore`. Data always flows in chunks: no object, part or block is
//! ever held whole in memory.
//!
//! Two stores: `LocalBlocks`, files in a directory (the default), and
//! `CloudBlocks`, objects in an S3, GCS or Azure bucket through the
//! `object_store` crate, for deployments that outgrow one disk.
//!
//! om's deleted-blocks table is one per om cluster, and the gateway that
//! reclaims deletes what it lists from its own store: every gateway of one
//! om cluster must therefore use the same block store.

mod cloud;
mod local;

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

pub use cloud::CloudBlocks;
pub use local::LocalBlocks;

/// A stream of data chunks.
pub type ByteStream<'a> = BoxStream<'a, io::Result<Bytes>>;

/// Size of the chunks reads yield.
const READ_CHUNK: usize = 256 * 1024;

/// Where object data lives. Every method is safe to call concurrently; a
/// block id is written by one writer only (om hands each id out once).
#[async_trait]
pub trait BlockStore: Send + Sync + 'static {
    /// Writes block `id` from `data` (replacing any earlier content), durable
    /// when this returns; answers the bytes written. On error nothing is
    /// left under the block's name.
    async fn put(&self, id: u64, data: ByteStream<'_>) -> io::Result<u64>;

    /// `len` bytes of block `id` from `offset`. Fails at once when the block
    /// is missing or shorter than `offset + len`.
    async fn get(&self, id: u64, offset: u64, len: u64) -> io::Result<ByteStream<'static>>;

    /// Removes block `id`; a missing block is not an error.
    async fn delete(&self, id: u64) -> io::Result<()>;

    /// Removes unfinished writes older than `age` (what a crashed gateway
    /// left); answers how many were removed.
    async fn sweep(&self, age: Duration) -> io::Result<usize>;
}

/// The block store `--blocks` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A directory (a path or `file:///path`).
    Dir(PathBuf),
    /// A bucket and optional prefix: `s3://`, `gs://` or `az://`.
    Cloud(url::Url),
}

impl Location {
    /// Parses `--blocks`: a directory, `file:///path`, or
    /// `s3://BUCKET[/PREFIX]`, `gs://BUCKET[/PREFIX]`, `az://CONTAINER[/PREFIX]`.
    pub fn parse(s: &str) -> Result<Location> {
        if s.is_empty() {
            bail!("--blocks is empty");
        }
        let Some((scheme, rest)) = s.split_once("://") else {
            return Ok(Location::Dir(PathBuf::from(s)));
        };
        match scheme {
            "file" => {
                if !rest.starts_with('/') {
                    bail!("--blocks {s:?}: a file URL needs an absolute path (file:///path)");
                }
                Ok(Location::Dir(PathBuf::from(rest)))
            }
            "s3" | "gs" | "az" => {
                let url = url::Url::parse(s).with_context(|| format!("--blocks {s:?}"))?;
                if url.host_str().is_none_or(str::is_empty) {
                    bail!("--blocks {s:?}: no bucket named ({scheme}://BUCKET[/PREFIX])");
                }
                if url.query().is_some() || url.fragment().is_some() {
                    bail!("--blocks {s:?}: a block store URL takes no query or fragment");
                }
                Ok(Location::Cloud(url))
            }
            _ => bail!(
                "--blocks {s:?}: unsupported block store {scheme:?} \
                 (a directory, file:///path, s3://, gs:// or az://)"
            ),
        }
    }

    /// Opens the store, checking that it can be reached: a directory is
    /// created if missing; a bucket is listed once, so a wrong name or
    /// credential fails here and not on the first upload.
    pub async fn open(&self) -> Result<Arc<dyn BlockStore>> {
        Ok(match self {
            Location::Dir(dir) => Arc::new(
                LocalBlocks::open(dir)
                    .with_context(|| format!("opening the block store {}", dir.display()))?,
            ),
            Location::Cloud(url) => Arc::new(
                CloudBlocks::open(url)
                    .await
                    .with_context(|| format!("opening the block store {url}"))?,
            ),
        })
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Dir(d) => write!(f, "{}", d.display()),
            Location::Cloud(u) => write!(f, "{u}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        let dir = |s: &str| Location::Dir(PathBuf::from(s));
        assert_eq!(Location::parse("blocks").unwrap(), dir("blocks"));
        assert_eq!(Location::parse("/data/b").unwrap(), dir("/data/b"));
        assert_eq!(Location::parse("file:///data/b").unwrap(), dir("/data/b"));
        assert!(Location::parse("file://data").is_err());
        assert!(Location::parse("").is_err());
        assert!(Location::parse("ftp://x/y").is_err());
        assert!(Location::parse("s3:///prefix").is_err());
        assert!(Location::parse("s3://b/p?x=1").is_err());
        let Location::Cloud(u) = Location::parse("s3://bucket/om/blocks").unwrap() else {
            panic!("not a bucket");
        };
        assert_eq!((u.host_str(), u.path()), (Some("bucket"), "/om/blocks"));
        assert!(matches!(
            Location::parse("gs://b").unwrap(),
            Location::Cloud(_)
        ));
        assert!(matches!(
            Location::parse("az://container/p").unwrap(),
            Location::Cloud(_)
        ));
    }
}
