use prost::Message;

use super::*;

#[test]
fn common_prefix_rules() {
    assert_eq!(common_prefix(b"a/b/c", b"", b"/"), Some(&b"a/"[..]));
    assert_eq!(common_prefix(b"a/b/c", b"a/", b"/"), Some(&b"a/b/"[..]));
    assert_eq!(common_prefix(b"a/b", b"a/", b"/"), None);
    assert_eq!(common_prefix(b"a/b", b"a/", b""), None);
    assert_eq!(common_prefix(b"x--y--z", b"", b"--"), Some(&b"x--"[..]));
    // The delimiter right at the prefix boundary still rolls up.
    assert_eq!(common_prefix(b"a//", b"a/", b"/"), Some(&b"a//"[..]));
}

#[test]
fn markers_inside_a_common_prefix_roll_up() {
    // S3: start-after a/b with delimiter / lists nothing under a/.
    assert_eq!(marker_prefix(b"a/b", b"", b"/", None), Some(&b"a/"[..]));
    assert_eq!(marker_prefix(b"a/", b"", b"/", None), Some(&b"a/"[..]));
    assert_eq!(marker_prefix(b"c-1", b"", b"-", None), Some(&b"c-"[..]));
    assert_eq!(
        marker_prefix(b"p/a/b", b"p/", b"/", None),
        Some(&b"p/a/"[..])
    );
    assert_eq!(marker_prefix(b"a", b"", b"/", None), None);
    assert_eq!(marker_prefix(b"a/b", b"", b"", None), None);
    // A marker outside the prefix is an ordinary marker.
    assert_eq!(marker_prefix(b"b/x", b"a/", b"/", None), None);
    // Bytes after the terminator (an upload id) are not searched.
    let mut upload = b"ab\0".to_vec();
    upload.extend_from_slice(&0x2f2f_u64.to_be_bytes());
    assert_eq!(marker_prefix(&upload, b"", b"/", Some(0)), None);
}

#[test]
fn run_tracker_seeks_at_the_nth_entry() {
    let mut r = RunTracker::new(3);
    r.start();
    assert_eq!(r.step(), RunStep::Next);
    assert_eq!(r.step(), RunStep::SeekPast);
    r.start();
    assert_eq!(r.step(), RunStep::Next);
    let mut never = RunTracker::new(usize::MAX);
    never.start();
    for _ in 0..1000 {
        assert_eq!(never.step(), RunStep::Next);
    }
}

#[test]
fn tokens_round_trip_and_refuse_tampering() {
    let t = ContinuationToken {
        version: 1,
        listing: "keys".into(),
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        bucket_object_id: 7,
        prefix: b"a/".to_vec(),
        delimiter: b"/".to_vec(),
        resume: b"a/b0".to_vec(),
    };
    let s = t.encode_token();
    assert_eq!(ContinuationToken::decode_token(&s, &t).unwrap(), t);
    let mut chars: Vec<char> = s.chars().collect();
    chars[4] = if chars[4] == '0' { '1' } else { '0' };
    let tampered: String = chars.into_iter().collect();
    assert!(ContinuationToken::decode_token(&tampered, &t).is_err());
    let other = ContinuationToken {
        bucket: "bkt2".into(),
        ..t.clone()
    };
    assert!(ContinuationToken::decode_token(&s, &other).is_err());
    let recreated = ContinuationToken {
        bucket_object_id: 8,
        ..t.clone()
    };
    assert!(ContinuationToken::decode_token(&s, &recreated).is_err());
    assert!(ContinuationToken::decode_token("zz", &t).is_err());
}

#[test]
fn the_first_item_always_fits() {
    assert!(fits(0, 0, usize::MAX, 10));
    assert!(fits(1, 4, 6, 10));
    assert!(!fits(1, 4, 7, 10));
    assert!(!fits(3, usize::MAX - 1, 2, usize::MAX - 1));
}

#[test]
fn field_len_matches_prost() {
    // Singular fields omit empty values; elements of repeated ones (what
    // field_len sizes) never do, so only non-empty lengths compare here.
    for len in [1usize, 127, 128, 16_383, 16_384, 3 << 20] {
        let t = ContinuationToken {
            listing: "x".repeat(len),
            ..Default::default()
        };
        assert_eq!(field_len(len), t.encoded_len(), "{len}");
    }
}

/// The largest tokens om can issue for a tree within the path limits
/// (the longest names, a frame per level of the deepest path, the
/// largest ids) and for a key-order listing (the longest prefix and
/// resume key) fit `MAX_TOKEN_CHARS`, which is not loose.
#[test]
fn the_largest_tokens_fit_the_derived_limit() {
    let depth = crate::fs::MAX_PATH_DEPTH;
    let max_key = crate::validate::MAX_KEY_BYTES;
    let token = |listing: &str, prefix: usize, resume: Vec<u8>| ContinuationToken {
        version: 1,
        listing: listing.into(),
        volume: "v".repeat(63),
        bucket: "b".repeat(63),
        bucket_object_id: u64::MAX,
        prefix: vec![b'p'; prefix],
        delimiter: vec![b'd'; 16],
        resume,
    };
    let mut longest = 0;
    // A listed path of `listed` bytes and frames whose names, with it,
    // spell one path of `max_key` bytes: the longest single name (the
    // largest length prefixes) at the innermost frame.
    for listed in [0, 10, max_key / 2, max_key - 24] {
        // `P/n/n/…/n/NAME`: `levels` one-byte names, then the longest
        // NAME that keeps the path at `max_key` bytes.
        let sep = usize::from(listed > 0);
        let levels = depth.min((max_key - listed - sep - 1) / 2);
        let mut frames: Vec<StatusFrame> = (0..=levels)
            .map(|_| StatusFrame {
                dir: u64::MAX,
                after: Some("n".into()),
            })
            .collect();
        let name = max_key - listed - sep - 2 * levels;
        assert!(name >= 1);
        frames[levels].after = Some("n".repeat(name));
        let resume = StatusResume { frames }.encode_to_vec();
        assert!(resume.len() <= MAX_STATUS_RESUME_BYTES, "{}", resume.len());
        let chars = token("status", listed, resume).encode_token().len();
        assert!(chars <= MAX_TOKEN_CHARS, "{chars} > {MAX_TOKEN_CHARS}");
        longest = longest.max(chars);
    }
    let keys = token("open_files", max_key, vec![b'k'; max_key + 9]);
    let chars = keys.encode_token().len();
    assert!(chars <= MAX_TOKEN_CHARS, "{chars} > {MAX_TOKEN_CHARS}");
    longest = longest.max(chars);
    // Within 8 bytes per frame of the bound (the frames' length
    // prefixes and the listing name's slack).
    assert!(
        longest + 2 * 8 * (depth + 1) >= MAX_TOKEN_CHARS,
        "{longest} is far below {MAX_TOKEN_CHARS}"
    );
    assert!(check_token_len(&"0".repeat(MAX_TOKEN_CHARS)).is_ok());
    assert!(check_token_len(&"0".repeat(MAX_TOKEN_CHARS + 1)).is_err());
}
