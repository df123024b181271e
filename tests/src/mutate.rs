//! Byte-level mutations of encoded protobuf messages, for property tests that
//! feed random well-formed (and malformed) messages into om's entry points.
//! A mutation of a valid message's bytes that still decodes is a well-formed
//! message with random field values near valid ones, which reaches deeper
//! than random bytes alone.

use proptest::prelude::*;

/// One edit of an encoded message.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Flip one bit (position taken modulo the length).
    Flip(usize, u8),
    /// Overwrite one byte.
    Set(usize, u8),
    /// Insert bytes.
    Insert(usize, Vec<u8>),
    /// Remove up to `n` bytes.
    Delete(usize, usize),
    /// Cut the message short.
    Truncate(usize),
    /// Append a length-delimited field (a string, bytes or sub-message) with
    /// this field number: protobuf keeps the last value of a singular field,
    /// so this replaces a field with a long, odd or empty value.
    AppendField(u32, Vec<u8>),
    /// Append a varint field (a number, bool or enum) with this field number.
    AppendVarint(u32, u64),
}

/// Text that trips validators: separators, NUL, non-ASCII, long runs.
fn nasty_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        proptest::collection::vec(
            prop_oneof![
                Just(b"a".to_vec()),
                Just(b"/".to_vec()),
                Just(b"\0".to_vec()),
                Just(b".".to_vec()),
                Just(b"-".to_vec()),
                Just("é".as_bytes().to_vec()),
                Just("🦀".as_bytes().to_vec()),
                Just(vec![0xff]),
                Just(b"vol1".to_vec()),
                Just(b"bkt1".to_vec()),
                Just(b"fs1".to_vec()),
            ],
            0..40
        )
        .prop_map(|v| v.concat()),
        (1usize..20_000, any::<u8>()).prop_map(|(n, b)| vec![b'a' + b % 26; n]),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

fn numbers() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..4,
        Just(u64::MAX),
        Just(u64::from(u32::MAX)),
        Just(1 << 40),
        Just((5 << 40) + 1),
        Just(10_000),
        Just(10_001),
        any::<u64>(),
    ]
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (1u32..16, nasty_text()).prop_map(|(f, v)| Mutation::AppendField(f, v)),
        (1u32..16, numbers()).prop_map(|(f, v)| Mutation::AppendVarint(f, v)),
    ]
}

/// A few mutations in a row.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 1..5)
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Applies `muts` to a copy of `bytes`.
pub fn apply(bytes: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for m in muts {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
        match m {
            Mutation::Flip(i, bit) if !b.is_empty() => {
                let i = at(*i, b.len());
                b[i] ^= 1 << bit;
            }
            Mutation::Set(i, v) if !b.is_empty() => {
                let i = at(*i, b.len());
                b[i] = *v;
            }
            Mutation::Insert(i, v) => {
                let i = at(*i, b.len() + 1);
                b.splice(i..i, v.iter().copied());
            }
            Mutation::Delete(i, n) if !b.is_empty() => {
                let i = at(*i, b.len());
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            Mutation::Truncate(i) => {
                let i = at(*i, b.len() + 1);
                b.truncate(i);
            }
            Mutation::AppendField(field, v) => {
                varint(u64::from(field << 3 | 2), &mut b);
                varint(v.len() as u64, &mut b);
                b.extend_from_slice(v);
            }
            Mutation::AppendVarint(field, v) => {
                varint(u64::from(field << 3), &mut b);
                varint(*v, &mut b);
            }
            _ => {}
        }
    }
    b
}

/// Random bytes, sometimes empty.
pub fn random_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..96)
}
