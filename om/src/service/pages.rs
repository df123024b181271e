//! Page assembly shared by the listings: one seek, a bounded number of
//! entries, and a response byte budget.

use rocksdb::DB;

use crate::error::OmError;
use crate::listing::{Item, ScanSpec, Start, scan_page_within};
use crate::store::iter::IterStats;
use crate::store::table::{self, TableSchema};

/// One page of a listing: each item's name and the item as the caller
/// converted it.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<(String, T)>,
    pub truncated: bool,
    /// The last name returned when truncated: pass it as `start_after`.
    pub next_start_after: String,
    pub stats: IterStats,
}

/// An item of a page with roll-up: a converted entry with its name and
/// what else the next page's markers need of it (an upload id, a version
/// id), or a common prefix.
pub(super) enum Listed<M, T> {
    Entry(String, M, T),
    Prefix(String),
}

impl<M, T> Listed<M, T> {
    /// Reads one scanned item: an entry through `entry` (its name, marker,
    /// converted value and the bytes that adds to the response), a common
    /// prefix as it is.
    pub(super) fn read(
        item: Item,
        entry: impl FnOnce(Vec<u8>, Vec<u8>) -> Result<(String, M, T, usize), OmError>,
    ) -> Result<(Self, usize), OmError> {
        match item {
            Item::Entry { name, value } => {
                let (name, marker, t, bytes) = entry(name, value)?;
                Ok((Listed::Entry(name, marker, t), bytes))
            }
            Item::CommonPrefix(p) => {
                let p = utf8(p)?;
                let bytes = super::item_len(p.len());
                Ok((Listed::Prefix(p), bytes))
            }
        }
    }
}

/// A page with roll-up split into its entries and common prefixes, each in
/// order, and its last item: an entry's name and marker, or a prefix and
/// no marker (what the next page's markers are made of).
pub(super) struct RolledUp<M, T> {
    pub entries: Vec<T>,
    pub prefixes: Vec<String>,
    pub last: Option<(String, Option<M>)>,
}

impl<M, T> RolledUp<M, T> {
    pub fn of(items: Vec<Listed<M, T>>) -> Self {
        let mut out = RolledUp {
            entries: Vec::new(),
            prefixes: Vec::new(),
            last: None,
        };
        for item in items {
            match item {
                Listed::Entry(name, marker, t) => {
                    out.last = Some((name, Some(marker)));
                    out.entries.push(t);
                }
                Listed::Prefix(p) => {
                    out.last = Some((p.clone(), None));
                    out.prefixes.push(p);
                }
            }
        }
        out
    }
}

pub(super) fn utf8(b: Vec<u8>) -> Result<String, OmError> {
    String::from_utf8(b).map_err(|_| OmError::Internal("non-UTF-8 name in a table".to_string()))
}

/// The name and value of a table entry; listings without a delimiter see
/// nothing else.
pub(super) fn entry(item: Item) -> Result<(Vec<u8>, Vec<u8>), OmError> {
    match item {
        Item::Entry { name, value } => Ok((name, value)),
        Item::CommonPrefix(_) => Err(OmError::Internal(
            "a common prefix in a listing without a delimiter".to_string(),
        )),
    }
}

/// Reads one page of `S` under `parent` + `prefix`, after `start_after`, with
/// one native seek and at most `max` nexts (the last tells whether more
/// follow), converting each record with `convert`, which also says how many
/// bytes it adds to the response; the page stops before its items pass
/// `max_bytes` (its first item is always taken).
pub fn list_page<S: TableSchema, T>(
    db: &DB,
    parent: &[u8],
    prefix: &str,
    start_after: &str,
    (max, max_bytes): (usize, usize),
    mut convert: impl FnMut(S::Value) -> (T, usize),
) -> Result<Page<T>, OmError> {
    let start = if start_after.is_empty() {
        Start::Beginning
    } else {
        Start::After(start_after.as_bytes().to_vec())
    };
    let page = scan_page_within(
        db,
        &ScanSpec {
            table: S::CF,
            parent,
            prefix: prefix.as_bytes(),
            delimiter: b"",
            start,
            max,
            seek_after: usize::MAX,
            terminator: None,
            current_only: None,
            at: None,
        },
        max_bytes,
        |item| {
            let (name, value) = entry(item)?;
            let (t, bytes) = convert(table::decode::<S>(&value)?);
            Ok(((utf8(name)?, t), bytes))
        },
    )?;
    let truncated = page.resume.is_some();
    let next_start_after = if truncated {
        page.items
            .last()
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(Page {
        items: page.items,
        truncated,
        next_start_after,
        stats: page.stats,
    })
}

/// `list_page` of only the records `visible` admits: pages are read until
/// `max` visible records are found or the table ends, and a truncated page
/// resumes after its last visible record, so neither the records nor the
/// continuation name anything hidden.
pub fn filtered_page<S: TableSchema, T>(
    db: &DB,
    parent: &[u8],
    prefix: &str,
    start_after: &str,
    (max, max_bytes): (usize, usize),
    visible: impl Fn(&S::Value) -> bool,
    mut convert: impl FnMut(S::Value) -> (T, usize),
) -> Result<Page<T>, OmError> {
    let mut items = Vec::new();
    let mut bytes = 0;
    let mut after = start_after.to_string();
    let mut stats = IterStats::default();
    let truncated = loop {
        let room = (max - items.len(), max_bytes.saturating_sub(bytes));
        let page = list_page::<S, Option<T>>(db, parent, prefix, &after, room, |v| {
            if visible(&v) {
                let (t, n) = convert(v);
                bytes += n;
                (Some(t), n)
            } else {
                (None, 0)
            }
        })?;
        stats += page.stats;
        for (name, t) in page.items {
            if let Some(t) = t {
                items.push((name, t));
            }
        }
        if !page.truncated {
            break false;
        }
        if items.len() >= max || bytes >= max_bytes {
            break true;
        }
        after = page.next_start_after;
    };
    let next_start_after = match (truncated, items.last()) {
        (true, Some((n, _))) => n.clone(),
        _ => String::new(),
    };
    Ok(Page {
        truncated: truncated && !items.is_empty(),
        items,
        next_start_after,
        stats,
    })
}
