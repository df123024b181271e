//! The data path: request bodies streamed into blocks (hashing MD5 on the
//! way, bounded in size), and blocks streamed back as response bodies,
//! whole or a byte range. Chunks flow through; nothing is held whole.

use std::io;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use om_client::v1::BlockInfo;
use s3s::dto::StreamingBlob;
use s3s::{S3Error, S3ErrorCode, S3Result, StdError, s3_error};

use crate::blocks::{BlockStore, ByteStream};
use crate::errors;

/// The largest single PUT (and part) S3 accepts: 5 GiB.
pub const MAX_PUT_SIZE: u64 = 5 * 1024 * 1024 * 1024;

/// om's block size (`BLOCK_SIZE` in om's `apply.rs`): only a guess of how
/// many blocks a body of known length needs when its write session opens.
/// Each allocated block states its own capacity, which is what the data
/// path follows.
pub const PART_CHUNK: u64 = 256 * 1024 * 1024;

/// Why a body stopped early.
enum Stop {
    /// The request body failed (the client went away or sent a bad chunk).
    Client(String),
    /// A copy source failed to read.
    Source(String),
    TooLarge,
}

/// A request body (or copy source) being consumed: tracks its length,
/// hashes it, and refuses more than `limit` bytes.
pub struct Body {
    stream: BoxStream<'static, Result<Bytes, StdError>>,
    pending: Option<Bytes>,
    md5: Md5,
    total: u64,
    limit: u64,
    from_client: bool,
    stop: Option<Stop>,
}

impl Body {
    /// A request body.
    pub fn request(blob: StreamingBlob, limit: u64) -> Body {
        Body::new(blob.boxed(), limit, true)
    }

    /// Data read from the block store (a copy source).
    pub fn source(s: ByteStream<'static>, limit: u64) -> Body {
        Body::new(s.map_err(|e| Box::new(e) as StdError).boxed(), limit, false)
    }

    fn new(
        stream: BoxStream<'static, Result<Bytes, StdError>>,
        limit: u64,
        from_client: bool,
    ) -> Body {
        Body {
            stream,
            pending: None,
            md5: Md5::new(),
            total: 0,
            limit,
            from_client,
            stop: None,
        }
    }

    fn fail(&mut self, e: &StdError) -> io::Error {
        let why = e.to_string();
        self.stop = Some(if self.from_client {
            Stop::Client(why)
        } else {
            Stop::Source(why)
        });
        io::Error::other("body failed")
    }

    /// Whether more data follows (reads ahead one chunk if needed).
    pub async fn has_more(&mut self) -> S3Result<bool> {
        while self.pending.as_ref().is_none_or(Bytes::is_empty) {
            match self.stream.next().await {
                None => return Ok(false),
                Some(Ok(b)) => self.pending = Some(b),
                Some(Err(e)) => {
                    let _ = self.fail(&e);
                    return Err(self.error());
                }
            }
        }
        Ok(true)
    }

    /// The next chunk of at most `max` bytes, hashed and counted.
    async fn next_chunk(&mut self, max: u64) -> io::Result<Option<Bytes>> {
        if max == 0 {
            return Ok(None);
        }
        let mut chunk = match self.pending.take() {
            Some(b) if !b.is_empty() => b,
            _ => match self.stream.next().await {
                None => return Ok(None),
                Some(Ok(b)) => b,
                Some(Err(e)) => return Err(self.fail(&e)),
            },
        };
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        if chunk.len() > max {
            self.pending = Some(chunk.split_off(max));
        }
        self.total += chunk.len() as u64;
        if self.total > self.limit {
            self.stop = Some(Stop::TooLarge);
            return Err(io::Error::other("body too large"));
        }
        self.md5.update(&chunk);
        Ok(Some(chunk))
    }

    /// The next at most `cap` bytes, as a stream for one block.
    pub fn take(&mut self, cap: u64) -> ByteStream<'_> {
        futures::stream::try_unfold((self, cap), |(body, left)| async move {
            match body.next_chunk(left).await? {
                Some(c) => {
                    let n = c.len() as u64;
                    Ok(Some((c, (body, left - n))))
                }
                None => Ok(None),
            }
        })
        .boxed()
    }

    /// The S3 error for a failed write: the body's, or the store's.
    pub fn write_error(&mut self, e: &io::Error) -> S3Error {
        if self.stop.is_some() {
            self.error()
        } else {
            errors::from_io("write", e)
        }
    }

    fn error(&mut self) -> S3Error {
        match self.stop.take() {
            Some(Stop::Client(why)) => {
                tracing::debug!(%why, "request body failed");
                s3_error!(
                    IncompleteBody,
                    "the request body ended early or was malformed"
                )
            }
            Some(Stop::Source(why)) => {
                tracing::error!(%why, "copy source failed to read");
                S3Error::with_message(S3ErrorCode::InternalError, "the copy source failed to read")
            }
            Some(Stop::TooLarge) => s3_error!(
                EntityTooLarge,
                "an object or part is at most {} bytes",
                self.limit
            ),
            None => S3Error::new(S3ErrorCode::InternalError),
        }
    }

    /// Bytes read so far and their MD5.
    pub fn finish(self) -> (u64, [u8; 16]) {
        (self.total, self.md5.finalize().into())
    }
}

/// Checks what a body turned out to be against what the request declared.
pub fn check_body(
    size: u64,
    md5: &[u8; 16],
    declared_len: Option<i64>,
    declared_md5: Option<[u8; 16]>,
) -> S3Result<()> {
    if let Some(len) = declared_len
        && u64::try_from(len).ok() != Some(size)
    {
        return Err(s3_error!(
            IncompleteBody,
            "Content-Length is {len} but the body held {size} bytes"
        ));
    }
    if let Some(want) = declared_md5
        && &want != md5
    {
        return Err(s3_error!(
            BadDigest,
            "the Content-MD5 you specified did not match what we received"
        ));
    }
    Ok(())
}

/// The parts of `pieces` (`(name, offset, len)`, contiguous from 0) that
/// `want` covers, as `(name, offset within the piece, len)`.
pub fn spans<T: Clone>(
    pieces: &[(T, u64, u64)],
    want: Range<u64>,
) -> io::Result<Vec<(T, u64, u64)>> {
    let mut out = Vec::new();
    let mut expect = 0;
    for (t, off, len) in pieces {
        if *off != expect {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("blocks are not contiguous at offset {expect}"),
            ));
        }
        expect = off.saturating_add(*len);
        let start = want.start.max(*off);
        let end = want.end.min(expect);
        if start < end {
            out.push((t.clone(), start - off, end - start));
        }
    }
    if want.end > expect {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("blocks cover {expect} bytes, {} wanted", want.end),
        ));
    }
    Ok(out)
}

/// The `range` bytes of a key stored in `blocks`, as a response body. The
/// first block is opened before this returns, so a missing block is an
/// error answer rather than a broken body.
pub async fn read(
    store: &Arc<dyn BlockStore>,
    blocks: &[BlockInfo],
    range: Range<u64>,
) -> S3Result<ByteStream<'static>> {
    let pieces: Vec<(u64, u64, u64)> = blocks
        .iter()
        .map(|b| (b.block_id, b.offset, b.length))
        .collect();
    let parts = spans(&pieces, range).map_err(|e| errors::from_io("layout", &e))?;
    let mut parts = parts.into_iter();
    let Some((id, off, len)) = parts.next() else {
        return Ok(futures::stream::empty().boxed());
    };
    let first = store
        .get(id, off, len)
        .await
        .map_err(|e| errors::from_io("read", &e))?;
    let store = store.clone();
    let rest = futures::stream::iter(parts)
        .then(move |(id, off, len)| {
            let store = store.clone();
            async move { store.get(id, off, len).await }
        })
        .try_flatten();
    Ok(first
        .chain(rest)
        .inspect_err(|e| tracing::error!(error = %e, "block read failed mid-body"))
        .boxed())
}

/// A body stream as s3s wants it (`Sync`).
pub fn blob(s: ByteStream<'static>) -> StreamingBlob {
    StreamingBlob::wrap(sync_wrapper::SyncStream::new(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces() -> Vec<(char, u64, u64)> {
        vec![('a', 0, 10), ('b', 10, 10), ('c', 20, 5)]
    }

    #[test]
    fn spans_cover_ranges() {
        let p = pieces();
        assert_eq!(
            spans(&p, 0..25).unwrap(),
            vec![('a', 0, 10), ('b', 0, 10), ('c', 0, 5)]
        );
        assert_eq!(spans(&p, 5..12).unwrap(), vec![('a', 5, 5), ('b', 0, 2)]);
        assert_eq!(spans(&p, 10..20).unwrap(), vec![('b', 0, 10)]);
        assert_eq!(spans(&p, 24..25).unwrap(), vec![('c', 4, 1)]);
        assert!(spans(&p, 7..7).unwrap().is_empty());
        assert!(spans(&p, 0..26).is_err());
        let gap = vec![('a', 0, 10), ('b', 11, 10)];
        assert!(spans(&gap, 0..5).is_err());
        let none: Vec<(char, u64, u64)> = vec![];
        assert!(spans(&none, 0..0).unwrap().is_empty());
    }

    #[test]
    fn declared_length_and_digest() {
        let md5: [u8; 16] = Md5::digest(b"abc").into();
        assert!(check_body(3, &md5, Some(3), Some(md5)).is_ok());
        assert!(check_body(3, &md5, None, None).is_ok());
        let e = check_body(3, &md5, Some(4), None).unwrap_err();
        assert_eq!(e.code(), &S3ErrorCode::IncompleteBody);
        let e = check_body(3, &md5, Some(3), Some([0; 16])).unwrap_err();
        assert_eq!(e.code(), &S3ErrorCode::BadDigest);
    }

    #[tokio::test]
    async fn bodies_are_split_hashed_and_bounded() {
        let chunks = vec![
            Ok(Bytes::from_static(b"hello ")),
            Ok(Bytes::from_static(b"world")),
        ];
        let mut body = Body::new(futures::stream::iter(chunks).boxed(), 100, true);
        let mut blocks = Vec::new();
        while body.has_more().await.unwrap() {
            let parts: Vec<Bytes> = body.take(4).try_collect().await.unwrap();
            blocks.push(parts.concat());
        }
        // Blocks fill up across the body's chunks.
        assert_eq!(
            blocks,
            vec![b"hell".to_vec(), b"o wo".to_vec(), b"rld".to_vec()]
        );
        let (n, md5) = body.finish();
        assert_eq!(n, 11);
        assert_eq!(md5, <[u8; 16]>::from(Md5::digest(b"hello world")));

        let chunks = vec![Ok(Bytes::from_static(b"0123456789"))];
        let mut body = Body::new(futures::stream::iter(chunks).boxed(), 5, true);
        let r: io::Result<Vec<Bytes>> = body.take(100).try_collect().await;
        let e = body.write_error(&r.unwrap_err());
        assert_eq!(e.code(), &S3ErrorCode::EntityTooLarge);
    }
}
