//! Continuation tokens and the byte sizes a page's envelope may take.

use om_proto::store::BucketRecord;
use prost::Message;

use crate::error::OmError;

/// An opaque, validated continuation token. It names the listing it belongs
/// to (table, volume, bucket and its object id, prefix, delimiter) and where to
/// resume; a digest over all of it detects tampering, and a token presented to
/// another bucket or listing is refused.
#[derive(Clone, PartialEq, Message)]
pub struct ContinuationToken {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(string, tag = "2")]
    pub listing: String,
    #[prost(string, tag = "3")]
    pub volume: String,
    #[prost(string, tag = "4")]
    pub bucket: String,
    #[prost(uint64, tag = "5")]
    pub bucket_object_id: u64,
    #[prost(bytes = "vec", tag = "6")]
    pub prefix: Vec<u8>,
    #[prost(bytes = "vec", tag = "7")]
    pub delimiter: Vec<u8>,
    #[prost(bytes = "vec", tag = "8")]
    pub resume: Vec<u8>,
}

impl ContinuationToken {
    /// What a listing of `bucket` expects of a token presented to it, no
    /// resume point yet: the same listing, bucket (by object id, so not a
    /// recreated one), prefix and delimiter.
    pub fn expected(listing: &str, bucket: &BucketRecord, prefix: &[u8], delimiter: &[u8]) -> Self {
        ContinuationToken {
            version: 1,
            listing: listing.to_string(),
            volume: bucket.volume.clone(),
            bucket: bucket.name.clone(),
            bucket_object_id: bucket.object_id,
            prefix: prefix.to_vec(),
            delimiter: delimiter.to_vec(),
            resume: Vec::new(),
        }
    }

    fn digest(body: &[u8]) -> [u8; 16] {
        use md5::Digest;
        let mut h = md5::Md5::new();
        h.update(b"om-continuation-v1");
        h.update(body);
        h.finalize().into()
    }

    /// Hex of the encoded token followed by its digest.
    pub fn encode_token(&self) -> String {
        let mut body = self.encode_to_vec();
        let d = Self::digest(&body);
        body.extend_from_slice(&d);
        hex::encode(body)
    }

    /// Decodes and checks a token against the listing it is presented to.
    pub fn decode_token(
        token: &str,
        expect: &ContinuationToken,
    ) -> Result<ContinuationToken, OmError> {
        let bad = |why: &str| {
            OmError::invalid(
                "INVALID_CONTINUATION_TOKEN",
                "continuation_token",
                format!("continuation token {why}"),
            )
        };
        let raw = hex::decode(token).map_err(|_| bad("is not a token om issued"))?;
        if raw.len() < 16 {
            return Err(bad("is too short"));
        }
        let (body, d) = raw.split_at(raw.len() - 16);
        if Self::digest(body) != d {
            return Err(bad("was altered"));
        }
        let t = ContinuationToken::decode(body).map_err(|_| bad("is corrupt"))?;
        if t.version != 1 {
            return Err(bad("has an unknown version"));
        }
        if t.listing != expect.listing
            || t.volume != expect.volume
            || t.bucket != expect.bucket
            || t.bucket_object_id != expect.bucket_object_id
        {
            return Err(bad("belongs to another listing or bucket"));
        }
        if t.prefix != expect.prefix || t.delimiter != expect.delimiter {
            return Err(bad("was issued for another prefix or delimiter"));
        }
        Ok(t)
    }
}

/// Bytes of a protobuf varint holding `v`.
const fn varint_len(v: u64) -> usize {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

/// Bytes a length-delimited field (string, bytes or message) with a body of
/// `len` bytes takes in its message, for field numbers below 16 (one-byte
/// key), as every field of om's tokens and of the repeated items of its
/// listing responses has.
pub const fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// Longest listing name a token carries (`open_files`).
const MAX_LISTING_NAME: usize = 16;
/// Longest volume or bucket name (`validate::resource_name`).
const MAX_RESOURCE_NAME: usize = 63;
/// Longest delimiter (`validate::delimiter`).
const MAX_DELIMITER: usize = 16;
/// Bytes of a token's fixed-size and small fields beyond its strings.
const TOKEN_SCALARS: usize = (1 + 1) + (1 + 10); // version, bucket object id

/// Most bytes one `StatusFrame` adds to a `StatusResume` beyond its name: the
/// frame's key and length, the directory id (up to 10 varint bytes) and the
/// name's key and length.
const STATUS_FRAME_OVERHEAD: usize = 1
    + varint_len((1 + 10 + 1 + 2 + crate::validate::MAX_KEY_BYTES) as u64)
    + (1 + 10)
    + (1 + varint_len(crate::validate::MAX_KEY_BYTES as u64));

/// Largest ListStatus resume position om issues for a tree within the path
/// limits: one frame for the listed directory and one per directory level
/// below it (at most `fs::MAX_PATH_DEPTH + 1` frames), whose names spell one
/// path below the listed directory (at most `validate::MAX_KEY_BYTES`).
/// Linear in depth: frames hold names, not paths.
pub const MAX_STATUS_RESUME_BYTES: usize =
    (crate::fs::MAX_PATH_DEPTH + 1) * STATUS_FRAME_OVERHEAD + crate::validate::MAX_KEY_BYTES;

/// Most bytes a ListStatus token's prefix (the listed path) and resume
/// fields take together: the listed path and the frames' names spell one
/// path, so they share one `MAX_KEY_BYTES`.
const STATUS_POSITION: usize = (1 + varint_len(crate::validate::MAX_KEY_BYTES as u64))
    + (1 + varint_len(MAX_STATUS_RESUME_BYTES as u64))
    + (crate::fs::MAX_PATH_DEPTH + 1) * STATUS_FRAME_OVERHEAD
    + crate::validate::MAX_KEY_BYTES;

/// Most bytes a key-order token's prefix and resume fields take: a prefix
/// and a key name with an 8-byte suffix (open keys: `key \0 session id`).
const KEY_POSITION: usize =
    field_len(crate::validate::MAX_KEY_BYTES) + field_len(crate::validate::MAX_KEY_BYTES + 9);

/// Longest continuation token om issues, in characters, derived from the
/// request limits: hex of the encoded `ContinuationToken` (version, listing
/// name, volume, bucket, object id, delimiter, and the larger of the
/// ListStatus and key-order prefix and resume fields) and its 16-byte digest.
/// The gRPC edge refuses longer tokens before decoding them.
pub const MAX_TOKEN_CHARS: usize = 2
    * (TOKEN_SCALARS
        + field_len(MAX_LISTING_NAME)
        + 2 * field_len(MAX_RESOURCE_NAME)
        + field_len(MAX_DELIMITER)
        + if STATUS_POSITION > KEY_POSITION {
            STATUS_POSITION
        } else {
            KEY_POSITION
        }
        + 16);

/// Room a listing response keeps for everything but its items: the
/// continuation token, one marker (`next_start_after`, `next_key_marker`), and
/// flags, totals, scan statistics and an upload-id marker (under 128 bytes).
/// A page's items take at most the response byte budget minus this.
pub const PAGE_OVERHEAD_BYTES: usize =
    field_len(MAX_TOKEN_CHARS) + field_len(crate::validate::MAX_KEY_BYTES) + 128;

/// Refuses a continuation token longer than any om issues, before it is
/// decoded.
pub fn check_token_len(token: &str) -> Result<(), OmError> {
    if token.len() > MAX_TOKEN_CHARS {
        return Err(OmError::invalid(
            "INVALID_CONTINUATION_TOKEN",
            "continuation_token",
            format!(
                "continuation token is too long ({} characters; om issues at most {MAX_TOKEN_CHARS})",
                token.len()
            ),
        ));
    }
    Ok(())
}

/// One directory of a recursive ListStatus walk as its token stores it: the
/// directory's object id and the last name returned from it, which for every
/// frame but the innermost is the child directory being walked. Paths are
/// not stored (a frame's path is the names of the frames above it), so a
/// token grows with depth times the longest name, not with depth squared.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct StatusFrame {
    #[prost(uint64, tag = "1")]
    pub dir: u64,
    #[prost(string, optional, tag = "2")]
    pub after: Option<String>,
}

/// The resume position of a ListStatus token: its frames, outermost first.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct StatusResume {
    #[prost(message, repeated, tag = "1")]
    pub frames: Vec<StatusFrame>,
}
