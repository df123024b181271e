//! S3's URI encoding, as SigV4 and `encoding-type=url` use it: unreserved
//! characters (`A-Z a-z 0-9 - _ . ~`) as they are, `/` kept where asked,
//! every other byte `%XX`; and percent-decoding.

/// Appends `s` encoded to `out`, `/` kept when `keep_slash`.
pub fn encode_into(out: &mut String, s: &str, keep_slash: bool) {
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
}

/// `s` encoded, `/` kept when `keep_slash`.
pub fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    encode_into(&mut out, s, keep_slash);
    out
}

/// `s` percent-decoded (`+` a space when `plus_is_space`, as in form
/// data); `None` for a malformed escape or bytes that are not UTF-8.
pub fn decode(s: &str, plus_is_space: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        assert_eq!(encode("a b/c~é", true), "a%20b/c~%C3%A9");
        assert_eq!(encode("a/b", false), "a%2Fb");
        assert_eq!(decode("a%20b/c~%C3%A9", false).as_deref(), Some("a b/c~é"));
        assert_eq!(decode("a+b%2Fc", true).as_deref(), Some("a b/c"));
        assert_eq!(decode("a+b", false).as_deref(), Some("a+b"));
        assert_eq!(decode("%zz", true), None);
        assert_eq!(decode("%4", false), None);
    }
}
