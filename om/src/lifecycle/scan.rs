//! One page of a bucket's lifecycle scan: how the leader builds it from the
//! replicated cursor (`page`), and the limits every page keeps (`check_page`,
//! run by apply on every replica).
//!
//! A pass walks a bucket in two phases: 1 `objects` (the bucket's range of
//! `keys`: each current key followed by its noncurrent versions and delete
//! markers, newest first) and 2 `uploads` (its range of `uploads`). A page
//! resumes right after the stored cursor with one native seek: its iterator's
//! lower bound is the cursor's successor, so no entry at or before the cursor
//! is read again, and its upper bound is the end of the bucket's range, so
//! the page never walks tombstones past the bucket. `ResumedIter` counts
//! what the iterator actually yields at or before the cursor
//! (`resume_before_cursor`): 0 by the bound, and a resumption that read
//! entries again would show them.

use om_proto::store::{
    BucketRecord, KeyRecord, LifecycleItem, LifecycleRecord, LifecycleScan, LifecycleScanRecord,
};
use rocksdb::DB;

mod fso;

use super::eval::{self, Subject};
use crate::error::OmError;
pub use crate::limits::{
    MAX_DAY_MS, MAX_ENTRY_BYTES, MAX_PAGE_EVALUATED, MAX_PAGE_ITEMS, MIN_DAY_MS,
};
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{self, KeyTable, UploadTable};

pub const PHASE_IDLE: u32 = 0;
pub const PHASE_OBJECTS: u32 = 1;
pub const PHASE_UPLOADS: u32 = 2;
/// FILE_SYSTEM_OPTIMIZED buckets: their directory tree (`lifecycle::scan::fso`).
pub const PHASE_FILES: u32 = 3;

/// The phase a pass over a bucket of `layout` starts with.
pub fn first_phase(layout: u32) -> u32 {
    if layout == crate::store::records::LAYOUT_FSO {
        PHASE_FILES
    } else {
        PHASE_OBJECTS
    }
}

/// The phase after `phase` (idle once a pass is complete).
pub fn next_phase(phase: u32) -> u32 {
    if phase == PHASE_OBJECTS {
        PHASE_UPLOADS
    } else {
        PHASE_IDLE
    }
}

pub fn phase_name(phase: u32) -> &'static str {
    match phase {
        PHASE_IDLE => "idle",
        PHASE_OBJECTS => "objects",
        PHASE_UPLOADS => "uploads",
        PHASE_FILES => "files",
        _ => "unknown",
    }
}

/// The table a phase walks.
pub fn phase_table(phase: u32) -> &'static str {
    match phase {
        PHASE_UPLOADS => keys::UPLOADS_CF,
        PHASE_FILES => keys::FILES_CF,
        _ => keys::KEYS_CF,
    }
}

fn bad(reason: &str, field: &str, message: String) -> OmError {
    OmError::invalid(reason, field, message)
}

/// The limits of one page, whatever the state (apply's `limits`).
pub fn check_page(c: &LifecycleScan) -> Result<(), OmError> {
    if !matches!(c.phase, PHASE_OBJECTS | PHASE_UPLOADS | PHASE_FILES) {
        return Err(bad(
            "INVALID_LIFECYCLE_PAGE",
            "phase",
            format!("unknown scan phase {}", c.phase),
        ));
    }
    if c.start_pass && (c.phase == PHASE_UPLOADS || !c.from.is_empty()) {
        return Err(bad(
            "INVALID_LIFECYCLE_PAGE",
            "start_pass",
            "a pass starts at the beginning of its first phase".into(),
        ));
    }
    if !(MIN_DAY_MS..=MAX_DAY_MS).contains(&c.day_ms) {
        return Err(bad(
            "INVALID_LIFECYCLE_PAGE",
            "day_ms",
            format!("a lifecycle day is {MIN_DAY_MS} to {MAX_DAY_MS} ms"),
        ));
    }
    if c.items.len() > MAX_PAGE_ITEMS || c.evaluated > MAX_PAGE_EVALUATED {
        return Err(bad(
            "INVALID_LIFECYCLE_PAGE",
            "items",
            format!(
                "a page holds at most {MAX_PAGE_ITEMS} items and {MAX_PAGE_EVALUATED} evaluations"
            ),
        ));
    }
    if c.items.len() as u64 > c.evaluated {
        return Err(bad(
            "INVALID_LIFECYCLE_PAGE",
            "evaluated",
            "every item was evaluated".into(),
        ));
    }
    if c.from.len() > MAX_ENTRY_BYTES || c.to.len() > MAX_ENTRY_BYTES {
        return Err(bad(
            "INVALID_LIFECYCLE_PAGE",
            "to",
            format!("a cursor has at most {MAX_ENTRY_BYTES} bytes"),
        ));
    }
    if c.phase_done != c.to.is_empty() {
        return Err(bad(
            "INVALID_LIFECYCLE_PAGE",
            "to",
            "a page ends its phase or moves the cursor".into(),
        ));
    }
    // A tree walk's cursor is a path: it moves, but not in byte order.
    let ordered = c.phase != PHASE_FILES;
    if !c.phase_done && (c.to == c.from || (ordered && c.to <= c.from)) {
        return Err(bad(
            "INVALID_LIFECYCLE_PAGE",
            "to",
            "the cursor only moves forward".into(),
        ));
    }
    for (i, it) in c.items.iter().enumerate() {
        let in_page = !ordered || (it.entry > c.from && (c.phase_done || it.entry <= c.to));
        if it.entry.len() > MAX_ENTRY_BYTES || !in_page {
            return Err(bad(
                "INVALID_LIFECYCLE_PAGE",
                &format!("items[{i}].entry"),
                "an item is an entry of the page".into(),
            ));
        }
        let action_ok = match c.phase {
            PHASE_UPLOADS => it.action == eval::ACTION_ABORT_UPLOAD,
            PHASE_FILES => it.action == eval::ACTION_EXPIRE_FILE,
            _ => matches!(
                it.action,
                eval::ACTION_EXPIRE
                    | eval::ACTION_EXPIRE_NONCURRENT
                    | eval::ACTION_REMOVE_DELETE_MARKER
            ),
        };
        if !action_ok {
            return Err(bad(
                "INVALID_LIFECYCLE_PAGE",
                &format!("items[{i}].action"),
                format!("action {} is not one of phase {}", it.action, c.phase),
            ));
        }
        if it.rule_id.len() > super::MAX_RULE_ID_CHARS * 4 {
            return Err(bad(
                "INVALID_LIFECYCLE_PAGE",
                &format!("items[{i}].rule_id"),
                "a rule id has at most 255 characters".into(),
            ));
        }
    }
    Ok(())
}

/// How the scanner pages.
#[derive(Debug, Clone, Copy)]
pub struct PageLimits {
    /// Entries evaluated per page at most.
    pub evaluations: usize,
    /// Items per page at most.
    pub items: usize,
    pub day_ms: u64,
    /// A finished pass is followed by the next after this long.
    pub interval_ms: u64,
}

/// Whether `scan` is the stored scan of this bucket and configuration.
pub fn is_current(
    scan: &LifecycleScanRecord,
    bucket: &BucketRecord,
    config: &LifecycleRecord,
) -> bool {
    scan.bucket_object_id == bucket.object_id && scan.config_update_id == config.update_id
}

/// The stored cursor as status names it: the key (or path), and the
/// version id of a noncurrent version or the upload id of an upload. A
/// version's entry key holds only its stamp; whether its id is "null"
/// (written while the bucket was unversioned or suspended) the page that
/// moved the cursor recorded (`cursor_null_version`), so status names it as
/// ListObjectVersions does.
pub fn cursor_names(s: &LifecycleScanRecord, bucket_prefix: &[u8]) -> (String, String) {
    let rel = s.cursor.strip_prefix(bucket_prefix).unwrap_or_default();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if s.phase == PHASE_FILES {
        // `F` or `D`, then a path.
        return (text(s.cursor.get(1..).unwrap_or_default()), String::new());
    }
    if s.phase == PHASE_UPLOADS {
        return match keys::split_key_run(rel) {
            Some((k, id)) => (text(k), format!("{id:016x}")),
            None => (text(rel), String::new()),
        };
    }
    match keys::split_version(rel) {
        (k, Some(v)) => (
            text(k),
            crate::store::records::version_id(&KeyRecord {
                version: v,
                versioned: v != 0 && !s.cursor_null_version,
                ..Default::default()
            }),
        ),
        (k, None) => (text(k), String::new()),
    }
}

/// The next page of `bucket`'s scan at `now_ms`, or None when its pass is
/// complete and the next is not due yet. Reads the stored cursor's successor
/// with one seek and at most `limits.evaluations` entries (plus one, to tell
/// whether a delete marker is its key's only version).
pub fn page(
    db: &DB,
    bucket: &BucketRecord,
    config: &LifecycleRecord,
    scan: Option<&LifecycleScanRecord>,
    now_ms: u64,
    limits: PageLimits,
) -> Result<Option<LifecycleScan>, OmError> {
    let current = scan.filter(|s| is_current(s, bucket, config));
    let (start_pass, phase, from, newer) = match current {
        Some(s) if s.phase != PHASE_IDLE => {
            (false, s.phase, s.cursor.clone(), s.cursor_newer_noncurrent)
        }
        Some(s) if now_ms < s.last_pass_completed_ms.saturating_add(limits.interval_ms) => {
            return Ok(None);
        }
        _ => (true, first_phase(bucket.layout), Vec::new(), 0),
    };
    if phase == PHASE_FILES {
        let page = LifecycleScan {
            volume: bucket.volume.clone(),
            bucket: bucket.name.clone(),
            bucket_object_id: bucket.object_id,
            config_update_id: config.update_id,
            start_pass,
            phase,
            from,
            day_ms: limits.day_ms,
            ..Default::default()
        };
        return fso::page(db, bucket, config, page, now_ms, limits).map(Some);
    }
    let prefix = keys::object_prefix(&bucket.volume, &bucket.name);
    let lower = if from.is_empty() {
        prefix.clone()
    } else {
        keys::key_successor(&from)
    };
    let mut it = resumed_after(
        DeferredSeekIter::new(
            db,
            phase_table(phase),
            Some(lower),
            keys::prefix_end(&prefix),
        )?,
        &from,
    );
    let mut page = LifecycleScan {
        volume: bucket.volume.clone(),
        bucket: bucket.name.clone(),
        bucket_object_id: bucket.object_id,
        config_update_id: config.update_id,
        start_pass,
        phase,
        from: from.clone(),
        day_ms: limits.day_ms,
        ..Default::default()
    };
    let rules = &config.rules;
    let mut walk = Walk {
        rules,
        now_ms,
        day_ms: limits.day_ms,
        prefix: &prefix,
        newer,
        pending_marker: None,
        null_version: false,
    };
    // Position once (the page's one seek) and record what it cost.
    it.has_current();
    page.resume_seeks = it.stats().seeks;
    let mut ended = true;
    while let Some((k, v)) = it.current() {
        // One entry yields at most one item, plus the item of a delete
        // marker before it: stop one short of the item budget. At least one
        // entry per page, so the cursor always moves.
        let spent =
            page.evaluated as usize >= limits.evaluations || page.items.len() + 1 >= limits.items;
        if page.evaluated > 0 && spent {
            // Budget spent. A delete marker read last still needs its next
            // entry to tell whether it stands alone; the next page starts
            // after the marker, so reading that entry twice is harmless.
            if let Some((mk, update_id, rule)) = walk.pending_marker.take()
                && !walk.same_key_history(&mk, k)
            {
                page.items
                    .push(item(mk, update_id, eval::ACTION_REMOVE_DELETE_MARKER, rule));
            }
            ended = false;
            break;
        }
        page.evaluated += 1;
        if phase == PHASE_UPLOADS {
            walk.upload(k, v, &mut page.items)?;
        } else {
            walk.object(k, v, &mut page.items)?;
        }
        page.to = k.to_vec();
        page.to_null_version = walk.null_version;
        it.advance();
    }
    it.status()?;
    if ended {
        if let Some((mk, update_id, rule)) = walk.pending_marker.take() {
            page.items
                .push(item(mk, update_id, eval::ACTION_REMOVE_DELETE_MARKER, rule));
        }
        page.phase_done = true;
        page.to.clear();
        page.to_null_version = false;
    }
    page.resume_before_cursor = it.before_cursor();
    page.to_newer_noncurrent = walk.newer;
    Ok(Some(page))
}

/// A page's iterator, counting the entries it yields at or before the
/// cursor the page resumes from (`resume_before_cursor`). The count comes
/// from what the iterator yields, not from how its bounds were chosen, so
/// it is 0 only if resuming really read nothing again: an iterator bounded
/// at the cursor instead of after it, or positioned at the bucket's start,
/// shows every entry it yields again. Each entry is counted once, however
/// often `current` is asked for it.
pub struct ResumedIter<'a, F> {
    it: DeferredSeekIter<'a>,
    at_or_before: F,
    counted: bool,
    before_cursor: u64,
}

/// `it` over a table in key order, resuming after `cursor` (empty: the
/// phase's start, before which nothing lies).
pub fn resumed_after<'a>(
    it: DeferredSeekIter<'a>,
    cursor: &[u8],
) -> ResumedIter<'a, impl Fn(&[u8]) -> bool> {
    let cursor = cursor.to_vec();
    ResumedIter::new(it, move |k: &[u8]| {
        !cursor.is_empty() && k <= cursor.as_slice()
    })
}

impl<'a, F: Fn(&[u8]) -> bool> ResumedIter<'a, F> {
    /// `it`, where `at_or_before` tells an entry's key at or before the
    /// cursor.
    pub fn new(it: DeferredSeekIter<'a>, at_or_before: F) -> Self {
        ResumedIter {
            it,
            at_or_before,
            counted: false,
            before_cursor: 0,
        }
    }

    /// Positions the iterator (its one seek) and counts the entry there.
    pub fn has_current(&mut self) -> bool {
        self.current().is_some()
    }

    /// The entry at the position, counted the first time it is yielded.
    pub fn current(&mut self) -> Option<(&[u8], &[u8])> {
        let (k, v) = self.it.current()?;
        if !self.counted {
            self.counted = true;
            if (self.at_or_before)(k) {
                self.before_cursor += 1;
            }
        }
        Some((k, v))
    }

    /// Moves to the next entry (one native next).
    pub fn advance(&mut self) {
        self.counted = false;
        self.it.advance();
    }

    /// The native error iteration stopped on, if any.
    pub fn status(&self) -> Result<(), OmError> {
        self.it.status()
    }

    /// Native seeks and nexts so far (what positioning cost).
    pub fn stats(&self) -> crate::store::iter::IterStats {
        self.it.stats()
    }

    /// Entries yielded so far at or before the cursor.
    pub fn before_cursor(&self) -> u64 {
        self.before_cursor
    }
}

fn item(entry: Vec<u8>, update_id: u64, action: u32, rule_id: &str) -> LifecycleItem {
    LifecycleItem {
        entry,
        update_id,
        action,
        rule_id: rule_id.to_string(),
    }
}

/// State carried from one entry of a walk to the next.
struct Walk<'a> {
    rules: &'a [om_proto::v1::LifecycleRule],
    now_ms: u64,
    day_ms: u64,
    prefix: &'a [u8],
    /// Noncurrent versions of the current key seen so far.
    newer: u32,
    /// A current delete marker that `ExpiredObjectDeleteMarker` removes if
    /// no noncurrent version follows it.
    pending_marker: Option<(Vec<u8>, u64, &'a str)>,
    /// The entry read last is a noncurrent "null" version.
    null_version: bool,
}

impl<'a> Walk<'a> {
    /// Whether `entry` is a noncurrent version of the key at `current`.
    fn same_key_history(&self, current: &[u8], entry: &[u8]) -> bool {
        entry.len() == current.len() + 9 && entry.starts_with(current) && entry[current.len()] == 0
    }

    fn object(
        &mut self,
        k: &[u8],
        v: &[u8],
        items: &mut Vec<LifecycleItem>,
    ) -> Result<(), OmError> {
        if let Some((mk, update_id, rule)) = self.pending_marker.take()
            && !self.same_key_history(&mk, k)
        {
            items.push(item(mk, update_id, eval::ACTION_REMOVE_DELETE_MARKER, rule));
        }
        let Some(name) = k.get(self.prefix.len()..) else {
            return Ok(());
        };
        let (key, version) = keys::split_version(name);
        let key = String::from_utf8_lossy(key);
        let rec: KeyRecord = table::decode::<KeyTable>(v)?;
        self.null_version = version.is_some() && !rec.versioned;
        let subject = Subject {
            key: &key,
            size: rec.size,
            tags: &rec.tags,
            sized: true,
        };
        match version {
            None => {
                self.newer = 0;
                if rec.delete_marker {
                    if let Some(rule) = eval::expired_marker_rule(
                        self.rules,
                        &key,
                        eval::written_ms(&rec),
                        self.day_ms,
                        self.now_ms,
                    ) {
                        self.pending_marker = Some((k.to_vec(), rec.update_id, rule));
                    }
                } else if let Some(due) =
                    eval::current_expiry(self.rules, &subject, eval::written_ms(&rec), self.day_ms)
                    && due.is_due(self.now_ms)
                {
                    items.push(item(
                        k.to_vec(),
                        rec.update_id,
                        eval::ACTION_EXPIRE,
                        due.rule_id,
                    ));
                }
            }
            Some(_) => {
                if let Some(due) = eval::noncurrent_expiry(
                    self.rules,
                    &subject,
                    rec.noncurrent_since_ms,
                    self.newer,
                    self.day_ms,
                ) && due.is_due(self.now_ms)
                {
                    items.push(item(
                        k.to_vec(),
                        rec.update_id,
                        eval::ACTION_EXPIRE_NONCURRENT,
                        due.rule_id,
                    ));
                }
                self.newer = self.newer.saturating_add(1);
            }
        }
        Ok(())
    }

    fn upload(
        &mut self,
        k: &[u8],
        v: &[u8],
        items: &mut Vec<LifecycleItem>,
    ) -> Result<(), OmError> {
        let Some((key, _)) = k.get(self.prefix.len()..).and_then(keys::split_key_run) else {
            return Ok(());
        };
        let key = String::from_utf8_lossy(key);
        let rec = table::decode::<UploadTable>(v)?;
        if let Some(due) = eval::upload_expiry(self.rules, &key, rec.initiated_ms, self.day_ms)
            && due.is_due(self.now_ms)
        {
            items.push(item(
                k.to_vec(),
                rec.upload_id,
                eval::ACTION_ABORT_UPLOAD,
                due.rule_id,
            ));
        }
        Ok(())
    }
}
