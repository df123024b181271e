//! `CloudBlocks` keeps one object per block in a bucket (S3, GCS, Azure)
//! through the `object_store` crate, under `PREFIX/xx/<id as 16 hex digits>`
//! (`xx` the id's low byte, which spreads blocks over the store's key
//! partitions). Credentials, region and endpoint come from each store's
//! usual environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
//!
//! A block up to `PART` bytes is one PUT; a larger one is a multipart upload
//! of `PART`-sized parts, at most `PARTS_IN_FLIGHT` at a time, so a write
//! holds at most `PART * (PARTS_IN_FLIGHT + 1)` bytes. Either way the object
//! appears whole or not at all, once the store acknowledged it (S3, GCS and
//! Azure acknowledge durable writes). A write that fails aborts its upload.
//! What a crashed gateway leaves are incomplete multipart uploads, which
//! are invisible under any name; `object_store` cannot list them, so the
//! bucket's own lifecycle rule removes them (S3
//! `AbortIncompleteMultipartUpload`; docs/s3-gateway.md says so).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use tokio::io::AsyncWriteExt;

use super::{BlockStore, ByteStream};

/// Part size of a multipart block upload (S3 wants at least 5 MiB).
const PART: usize = 8 * 1024 * 1024;
/// Parts of one block uploaded at once.
const PARTS_IN_FLIGHT: usize = 2;

/// Blocks as objects in a bucket.
pub struct CloudBlocks {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl CloudBlocks {
    /// Connects to the bucket `url` names (`s3://`, `gs://` or `az://`),
    /// configured from the environment, and lists it once.
    pub async fn open(url: &url::Url) -> io::Result<CloudBlocks> {
        use object_store::aws::AmazonS3Builder;
        use object_store::azure::MicrosoftAzureBuilder;
        use object_store::gcp::GoogleCloudStorageBuilder;
        // The HTTP client's TLS uses the process's provider; install ring
        // (what om's own TLS uses) unless one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let u = url.as_str();
        let store: Arc<dyn ObjectStore> = match url.scheme() {
            "s3" => Arc::new(
                AmazonS3Builder::from_env()
                    .with_url(u)
                    .build()
                    .map_err(to_io)?,
            ),
            "gs" => Arc::new(
                GoogleCloudStorageBuilder::from_env()
                    .with_url(u)
                    .build()
                    .map_err(to_io)?,
            ),
            "az" => Arc::new(
                MicrosoftAzureBuilder::from_env()
                    .with_url(u)
                    .build()
                    .map_err(to_io)?,
            ),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("no object store for scheme {other:?}"),
                ));
            }
        };
        let prefix = Path::from_url_path(url.path()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("block prefix: {e}"))
        })?;
        let s = CloudBlocks::new(store, prefix);
        s.check().await?;
        Ok(s)
    }

    /// Blocks in `store` under `prefix`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> CloudBlocks {
        CloudBlocks { store, prefix }
    }

    fn block_path(&self, id: u64) -> Path {
        self.prefix
            .clone()
            .join(format!("{:02x}", id & 0xff))
            .join(format!("{id:016x}"))
    }

    /// Lists the prefix once: a missing bucket, a wrong credential or an
    /// unreachable endpoint fails here.
    async fn check(&self) -> io::Result<()> {
        match self.store.list(Some(&self.prefix)).next().await {
            Some(Err(e)) => Err(to_io(e)),
            _ => Ok(()),
        }
    }
}

/// An `object_store` error as an I/O error; a missing object stays
/// `NotFound`. Only the message is kept: it already quotes its causes.
fn to_io(e: object_store::Error) -> io::Error {
    let kind = match e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e.to_string())
}

#[async_trait]
impl BlockStore for CloudBlocks {
    async fn put(&self, id: u64, mut data: ByteStream<'_>) -> io::Result<u64> {
        let mut w = BufWriter::with_capacity(self.store.clone(), self.block_path(id), PART)
            .with_max_concurrency(PARTS_IN_FLIGHT);
        let mut n = 0u64;
        let written: io::Result<()> = async {
            while let Some(chunk) = data.next().await {
                let chunk = chunk?;
                n += chunk.len() as u64;
                w.put(chunk).await.map_err(to_io)?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = written {
            // Nothing was stored under the name: a small block is still in
            // the buffer; a large one's multipart upload is aborted.
            if let Err(a) = w.abort().await {
                tracing::warn!(block = id, error = %a, "aborting a failed block upload");
            }
            return Err(e);
        }
        // A failed completion aborts its own upload.
        w.shutdown().await?;
        Ok(n)
    }

    async fn get(&self, id: u64, offset: u64, len: u64) -> io::Result<ByteStream<'static>> {
        let path = self.block_path(id);
        let end = offset
            .checked_add(len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "block range overflows"))?;
        let short = |size: u64| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("block {path} holds {size} bytes, {len} wanted from {offset}"),
            )
        };
        if len == 0 {
            // A store refuses an empty range: ask for the size instead.
            let meta = self.store.head(&path).await.map_err(to_io)?;
            if meta.size < offset {
                return Err(short(meta.size));
            }
            return Ok(futures::stream::empty().boxed());
        }
        let opts = GetOptions {
            range: Some(GetRange::Bounded(offset..end)),
            ..Default::default()
        };
        let r = self.store.get_opts(&path, opts).await.map_err(to_io)?;
        if r.range != (offset..end) {
            // A range past the end comes back cut short.
            return Err(short(r.meta.size));
        }
        Ok(r.into_stream().map_err(to_io).boxed())
    }

    async fn delete(&self, id: u64) -> io::Result<()> {
        match self.store.delete(&self.block_path(id)).await {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            r => r.map_err(to_io),
        }
    }

    async fn sweep(&self, _age: Duration) -> io::Result<usize> {
        // Unfinished writes are incomplete multipart uploads, which the
        // bucket's lifecycle rule removes (see the module's comment).
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use object_store::memory::InMemory;

    fn store() -> (Arc<InMemory>, CloudBlocks) {
        let mem = Arc::new(InMemory::new());
        let s = CloudBlocks::new(mem.clone(), Path::from("om/blocks"));
        (mem, s)
    }

    fn body(data: &[u8], chunk: usize) -> ByteStream<'static> {
        let parts: Vec<io::Result<Bytes>> = data
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        futures::stream::iter(parts).boxed()
    }

    async fn read(s: &CloudBlocks, id: u64, off: u64, len: u64) -> io::Result<Vec<u8>> {
        let parts: Vec<Bytes> = s.get(id, off, len).await?.try_collect().await?;
        Ok(parts.concat())
    }

    #[tokio::test]
    async fn put_get_ranges_delete() {
        let (mem, s) = store();
        assert_eq!(s.put(0x1234, body(b"hello world", 4)).await.unwrap(), 11);
        let names: Vec<String> = mem
            .list(None)
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        assert_eq!(names, vec!["om/blocks/34/0000000000001234".to_string()]);
        assert_eq!(read(&s, 0x1234, 0, 11).await.unwrap(), b"hello world");
        assert_eq!(read(&s, 0x1234, 6, 5).await.unwrap(), b"world");
        assert_eq!(read(&s, 0x1234, 11, 0).await.unwrap(), b"");
        // Past the end, and a missing block, fail before any data.
        assert!(s.get(0x1234, 6, 6).await.is_err());
        assert!(s.get(0x1234, 12, 0).await.is_err());
        assert_eq!(
            s.get(7, 0, 1).await.err().map(|e| e.kind()),
            Some(io::ErrorKind::NotFound)
        );
        s.delete(0x1234).await.unwrap();
        s.delete(0x1234).await.unwrap();
        assert!(s.get(0x1234, 0, 1).await.is_err());
    }

    #[tokio::test]
    async fn large_blocks_go_up_in_parts() {
        let (_, s) = store();
        let data: Vec<u8> = (0..PART * 2 + 4097).map(|i| (i % 253) as u8).collect();
        assert_eq!(
            s.put(1, body(&data, 100_000)).await.unwrap(),
            data.len() as u64
        );
        assert_eq!(read(&s, 1, 0, data.len() as u64).await.unwrap(), data);
        let from = PART as u64 - 3;
        assert_eq!(
            read(&s, 1, from, 10).await.unwrap(),
            data[from as usize..from as usize + 10]
        );
    }

    #[tokio::test]
    async fn failed_write_leaves_nothing() {
        let (mem, s) = store();
        for size in [10, PART * 2] {
            let mut parts: Vec<io::Result<Bytes>> = vec![0u8; size]
                .chunks(1 << 20)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            parts.push(Err(io::Error::other("client went away")));
            assert!(
                s.put(9, futures::stream::iter(parts).boxed())
                    .await
                    .is_err()
            );
            let left: Vec<_> = mem.list(None).try_collect().await.unwrap();
            assert!(left.is_empty(), "{left:?}");
            assert!(s.get(9, 0, 0).await.is_err());
        }
    }
}
