//! A bucket's snapshots under the reserved prefix `.snapshot/NAME/`, as
//! Ozone serves them: GET, HEAD and listings read the key as snapshot
//! `NAME` shows it; every write there is refused (AccessDenied), since a
//! snapshot never changes.

use s3s::{S3Result, s3_error};

/// The reserved prefix.
pub const PREFIX: &str = ".snapshot/";

/// `.snapshot/NAME/rest` as (`NAME`, `rest`); `None` for any other key.
pub fn split(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix(PREFIX)?;
    let (name, rest) = rest.split_once('/')?;
    (!name.is_empty()).then_some((name, rest))
}

/// Refuses a write to a key under the reserved prefix.
pub fn writable(key: &str) -> S3Result<()> {
    if key.starts_with(PREFIX) {
        return Err(s3_error!(
            AccessDenied,
            "keys under .snapshot/ are a bucket's snapshots, which are read-only"
        ));
    }
    Ok(())
}

/// What a listing under `.snapshot/NAME/` asks om for: the snapshot, the
/// prefix and marker within it, and what to put back in front of every
/// name of the answer.
pub struct Scoped {
    pub snapshot: String,
    pub prefix: String,
    pub start_after: String,
    pub outer: String,
}

/// A listing's prefix scoped to a snapshot, when it names one.
pub fn scope(prefix: &str, start_after: &str) -> Option<Scoped> {
    let (name, inner) = split(prefix)?;
    let outer = format!("{PREFIX}{name}/");
    let start_after = match start_after.strip_prefix(outer.as_str()) {
        Some(s) => s.to_string(),
        None if start_after > outer.as_str() => char::MAX.to_string(),
        None => String::new(),
    };
    Some(Scoped {
        snapshot: name.to_string(),
        prefix: inner.to_string(),
        start_after,
        outer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserved_prefix_names_a_snapshot_and_a_key() {
        assert_eq!(split(".snapshot/daily/a/b"), Some(("daily", "a/b")));
        assert_eq!(split(".snapshot/daily/"), Some(("daily", "")));
        assert_eq!(split(".snapshot/daily"), None);
        assert_eq!(split(".snapshot//a"), None);
        assert_eq!(split("a/.snapshot/x/y"), None);
        assert!(writable(".snapshot/daily/a").is_err());
        assert!(writable("a").is_ok());
        let s = scope(".snapshot/d/docs/", ".snapshot/d/docs/a").unwrap();
        assert_eq!(
            (
                s.snapshot.as_str(),
                s.prefix.as_str(),
                s.start_after.as_str()
            ),
            ("d", "docs/", "docs/a")
        );
        assert_eq!(s.outer, ".snapshot/d/");
        assert_eq!(scope(".snapshot/d/", "").unwrap().start_after, "");
        assert!(scope("docs/", "").is_none());
    }
}
