//! The model test of lifecycle scans: random histories in every
//! versioning state, random rules and page sizes, against a naive model of
//! S3's semantics (its own day arithmetic).

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::{
    LifecycleAbortUpload, LifecycleExpiration, LifecycleFilter, LifecycleNoncurrentExpiration,
    LifecycleRule, lifecycle_filter::Predicate,
};

use super::scan_tests::{DAY, at, delete, next_page, set_rules, stored_scan, versioning};
use crate::apply::tests::{Sm, setup};
use crate::apply::{LAYOUT_OBJECT_STORE, versions};
use crate::lifecycle::scan::{self, PageLimits};
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{self, KeyTable};

/// A small deterministic generator (xorshift64*), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One version as the model sees it.
#[derive(Debug, Clone)]
struct MVersion {
    /// (version id, delete marker) as stored; new markers the model adds
    /// are `("*new*", true)` (enabled) or `("null", true)` (suspended).
    id: (String, bool),
    marker: bool,
    null: bool,
    /// When the version was written (the model's own record of each write;
    /// a delete marker's creation time).
    created: u64,
    since: u64,
    size: u64,
    tags: std::collections::BTreeMap<String, String>,
}

/// The first day boundary at or after `t + days` days, found by walking
/// whole days (independent of `eval::after_days`' arithmetic).
fn model_after(t: u64, days: u32) -> u64 {
    let target = t + u64::from(days) * DAY;
    let mut m = t / DAY * DAY;
    while m < target {
        m += DAY;
    }
    m
}

fn model_matches(r: &LifecycleRule, key: &str, v: &MVersion, sized: bool) -> bool {
    if !r.enabled {
        return false;
    }
    let tag_ok = |k: &str, val: &str| v.tags.get(k).map(String::as_str) == Some(val);
    match r.filter.as_ref().and_then(|f| f.predicate.clone()) {
        None => true,
        Some(Predicate::Prefix(p)) => key.starts_with(&p),
        Some(Predicate::Tag(t)) => tag_ok(&t.key, &t.value),
        Some(Predicate::ObjectSizeGreaterThan(n)) => sized && v.size > n,
        Some(Predicate::ObjectSizeLessThan(n)) => sized && v.size < n,
        Some(Predicate::And(a)) => {
            key.starts_with(&a.prefix)
                && a.tags.iter().all(|t| tag_ok(&t.key, &t.value))
                && a.object_size_greater_than
                    .is_none_or(|n| sized && v.size > n)
                && a.object_size_less_than.is_none_or(|n| sized && v.size < n)
        }
    }
}

/// S3's semantics at `now`, applied until nothing more is due: the state a
/// scanner must reach (whatever its page boundaries) after enough passes.
fn model_fixpoint(
    rules: &[LifecycleRule],
    state: u32,
    now: u64,
    mut objects: std::collections::BTreeMap<String, Vec<MVersion>>,
) -> std::collections::BTreeMap<String, Vec<MVersion>> {
    loop {
        let mut changed = false;
        for (key, vs) in objects.iter_mut() {
            if vs.is_empty() {
                continue;
            }
            // The current version.
            let cur = vs[0].clone();
            let cur_due = !cur.marker
                && rules.iter().any(|r| {
                    model_matches(r, key, &cur, true)
                        && r.expiration
                            .as_ref()
                            .is_some_and(|e| match (e.days, e.date_ms) {
                                (Some(d), _) => model_after(cur.created, d) <= now,
                                (None, Some(date)) => date <= now,
                                _ => false,
                            })
                });
            if cur_due {
                changed = true;
                let marker = |id: &str| MVersion {
                    id: (id.to_string(), true),
                    marker: true,
                    null: id == "null",
                    created: now,
                    since: 0,
                    size: 0,
                    tags: Default::default(),
                };
                match state {
                    versions::UNVERSIONED => {
                        vs.remove(0);
                    }
                    versions::ENABLED => {
                        vs[0].since = now;
                        vs.insert(0, marker("*new*"));
                    }
                    _ => {
                        vs.retain(|v| !v.null);
                        // The current version, unless it was the null one
                        // (gone), becomes noncurrent now.
                        if let Some(c) = vs.first_mut()
                            && c.id == cur.id
                        {
                            c.since = now;
                        }
                        vs.insert(0, marker("null"));
                    }
                }
                continue;
            }
            // Noncurrent versions, newest first, counting those kept.
            let mut kept = 0u32;
            let mut i = 1;
            while i < vs.len() {
                let v = vs[i].clone();
                let due = rules.iter().any(|r| {
                    model_matches(r, key, &v, true)
                        && r.noncurrent_version_expiration.as_ref().is_some_and(|n| {
                            kept >= n.newer_noncurrent_versions
                                && model_after(v.since, n.noncurrent_days) <= now
                        })
                });
                if due {
                    vs.remove(i);
                    changed = true;
                } else {
                    kept += 1;
                    i += 1;
                }
            }
            // A lone delete marker.
            if vs.len() == 1 && vs[0].marker {
                let m = vs[0].clone();
                let none = MVersion {
                    size: 0,
                    tags: Default::default(),
                    ..m.clone()
                };
                let due = rules.iter().any(|r| {
                    model_matches(r, key, &none, true)
                        && r.expiration.as_ref().is_some_and(|e| {
                            e.expired_object_delete_marker == Some(true)
                                || match (e.days, e.date_ms) {
                                    (Some(d), _) => model_after(m.created, d) <= now,
                                    (None, Some(date)) => date <= now,
                                    _ => false,
                                }
                        })
                });
                if due {
                    vs.clear();
                    changed = true;
                }
            }
        }
        objects.retain(|_, vs| !vs.is_empty());
        if !changed {
            return objects;
        }
    }
}

fn random_rules(rng: &mut Rng) -> Vec<LifecycleRule> {
    use om_proto::v1::{LifecycleAnd, LifecycleTag};
    let tag = |rng: &mut Rng| LifecycleTag {
        key: ["class", "team"][rng.below(2) as usize].into(),
        value: ["tmp", "keep"][rng.below(2) as usize].into(),
    };
    let n = 1 + rng.below(3);
    (0..n)
        .map(|i| {
            let predicate = match rng.below(7) {
                0 | 1 => None,
                2 => Some(Predicate::Prefix(
                    ["a/", "b/", "a/1"][rng.below(3) as usize].into(),
                )),
                3 => Some(Predicate::Tag(tag(rng))),
                4 => Some(Predicate::ObjectSizeGreaterThan(rng.below(20))),
                5 => Some(Predicate::ObjectSizeLessThan(1 + rng.below(20))),
                _ => Some(Predicate::And(LifecycleAnd {
                    prefix: "a/".into(),
                    tags: if rng.chance(50) {
                        vec![tag(rng)]
                    } else {
                        vec![]
                    },
                    object_size_greater_than: Some(rng.below(10)),
                    object_size_less_than: None,
                })),
            };
            let tagged = matches!(&predicate, Some(Predicate::Tag(_)))
                || matches!(&predicate, Some(Predicate::And(a)) if !a.tags.is_empty());
            let mut r = LifecycleRule {
                id: format!("r{i}"),
                enabled: rng.chance(90),
                filter: predicate.map(|p| LifecycleFilter { predicate: Some(p) }),
                ..Default::default()
            };
            if rng.chance(60) {
                r.expiration = Some(match rng.below(3) {
                    0 if !tagged => LifecycleExpiration {
                        expired_object_delete_marker: Some(true),
                        ..Default::default()
                    },
                    1 => LifecycleExpiration {
                        date_ms: Some((5 + rng.below(10)) * DAY),
                        ..Default::default()
                    },
                    _ => LifecycleExpiration {
                        days: Some(1 + rng.below(3) as u32),
                        ..Default::default()
                    },
                });
            }
            if rng.chance(50) {
                r.noncurrent_version_expiration = Some(LifecycleNoncurrentExpiration {
                    noncurrent_days: 1 + rng.below(3) as u32,
                    newer_noncurrent_versions: rng.below(3) as u32,
                });
            }
            if !tagged
                && (rng.chance(30)
                    || (r.expiration.is_none() && r.noncurrent_version_expiration.is_none()))
            {
                r.abort_incomplete_multipart_upload = Some(LifecycleAbortUpload {
                    days_after_initiation: 1 + rng.below(3) as u32,
                });
            }
            r
        })
        .collect()
}

/// When each version (key name, version id) was written, as the history
/// wrote it: an overwrite of a `null` version replaces its entry.
type Written = std::collections::BTreeMap<(String, String), u64>;

/// The bucket's objects as the model sees them, read from `keys`, each
/// object version's age from the model's record of its write.
fn model_state(sm: &Sm, written: &Written) -> std::collections::BTreeMap<String, Vec<MVersion>> {
    let prefix = keys::object_prefix("vol", "bkt");
    let mut it = DeferredSeekIter::with_prefix(&sm.db, keys::KEYS_CF, &prefix).unwrap();
    let mut out: std::collections::BTreeMap<String, Vec<MVersion>> = Default::default();
    while let Some((k, v)) = it.current() {
        let (name, _) = keys::split_version(&k[prefix.len()..]);
        let rec = table::decode::<KeyTable>(v).unwrap();
        let id = versions::version_id(&rec);
        let name = String::from_utf8(name.to_vec()).unwrap();
        let created = if rec.delete_marker {
            rec.creation_time_ms
        } else {
            written[&(name.clone(), id.clone())]
        };
        out.entry(name).or_default().push(MVersion {
            id: (id.clone(), rec.delete_marker),
            marker: rec.delete_marker,
            null: id == "null",
            created,
            since: rec.noncurrent_since_ms,
            size: rec.size,
            tags: rec.tags.clone(),
        });
        it.advance();
    }
    out
}

fn uploads_left(sm: &Sm) -> Vec<Vec<u8>> {
    let prefix = keys::object_prefix("vol", "bkt");
    let mut it = DeferredSeekIter::with_prefix(&sm.db, keys::UPLOADS_CF, &prefix).unwrap();
    let mut out = Vec::new();
    while let Some((k, _)) = it.current() {
        out.push(k.to_vec());
        it.advance();
    }
    out
}

/// Random histories in every versioning state, random rules, random page
/// sizes: after passes at `now` until none acts, the bucket holds exactly
/// what S3's semantics leave (the model), uploads included.
#[test]
fn scans_reach_the_state_s3s_semantics_give() {
    for seed in 1..=60u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        at(&mut sm, DAY + rng.below(DAY));
        let mut state = versions::UNVERSIONED;
        // A third of the histories stay unversioned, where writing a key
        // again replaces it in place.
        let may_version = seed % 3 != 0;
        let names = ["a/1", "a/2", "b/1", "c"];
        let mut uploads = Vec::new();
        let mut written = Written::new();
        for _ in 0..(10 + rng.below(30)) {
            let t = sm.next_now() + rng.below(DAY * 2 / 3);
            at(&mut sm, t);
            let name = names[rng.below(names.len() as u64) as usize];
            match rng.below(10) {
                0 if may_version && state != versions::ENABLED => {
                    state = versions::ENABLED;
                    versioning(&mut sm, state);
                }
                1 if state == versions::ENABLED => {
                    state = versions::SUSPENDED;
                    versioning(&mut sm, state);
                }
                2 | 3 => {
                    // May be refused (no such key): changes nothing then.
                    sm.apply(Op::DeleteKey(st::DeleteKey {
                        volume: "vol".into(),
                        bucket: "bkt".into(),
                        key: name.into(),
                        version_id: String::new(),
                        conditions: Default::default(),
                    }));
                }
                4 => {
                    // Remove a random existing version permanently.
                    let s = model_state(&sm, &written);
                    if let Some(vs) = s.get(name) {
                        let v = &vs[rng.below(vs.len() as u64) as usize];
                        delete(&mut sm, name, &v.id.0);
                    }
                }
                5 => {
                    if let command_result::Result::Upload(u) =
                        sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
                            volume: "vol".into(),
                            bucket: "bkt".into(),
                            key: name.into(),
                            ..Default::default()
                        }))
                    {
                        let u = u.upload.unwrap();
                        uploads.push((name, u.initiated_ms, u.upload_id));
                    }
                }
                _ => {
                    let mut tags = std::collections::BTreeMap::new();
                    if rng.chance(50) {
                        tags.insert(
                            ["class", "team"][rng.below(2) as usize].to_string(),
                            ["tmp", "keep"][rng.below(2) as usize].to_string(),
                        );
                    }
                    let put = sm.ok(Op::PutKey(st::PutKey {
                        volume: "vol".into(),
                        bucket: "bkt".into(),
                        key: name.into(),
                        size: rng.below(25),
                        block_size: 1 << 20,
                        etag: "0123456789abcdef0123456789abcdef".into(),
                        tags,
                        ..Default::default()
                    }));
                    let command_result::Result::Key(k) = put else {
                        panic!("seed {seed}: PutKey answered no key")
                    };
                    let id = versions::version_id(&k.key.unwrap());
                    written.insert((name.to_string(), id), t);
                }
            }
        }
        let rules = random_rules(&mut rng);
        if crate::lifecycle::validate(&rules, crate::rules::CURRENT).is_err() {
            continue;
        }
        set_rules(&mut sm, rules.clone());
        let now = sm.next_now() + rng.below(6 * DAY);
        let before = model_state(&sm, &written);
        let want = model_fixpoint(&rules, state, now, before.clone());
        let mut want_uploads: Vec<Vec<u8>> = uploads
            .iter()
            .filter(|(name, initiated, _)| {
                let v = MVersion {
                    id: (String::new(), false),
                    marker: false,
                    null: false,
                    created: 0,
                    since: 0,
                    size: 0,
                    tags: Default::default(),
                };
                !rules.iter().any(|r| {
                    model_matches(r, name, &v, false)
                        && r.abort_incomplete_multipart_upload
                            .as_ref()
                            .is_some_and(|a| {
                                model_after(*initiated, a.days_after_initiation) <= now
                            })
                })
            })
            .map(|(name, _, id)| keys::upload_key("vol", "bkt", name, *id))
            .collect();
        want_uploads.sort();
        // Passes at `now` (every command then carries it) until one acts on
        // nothing; pages of a random size.
        let l = PageLimits {
            evaluations: 1 + rng.below(6) as usize,
            items: 2 + rng.below(5) as usize,
            day_ms: DAY,
            interval_ms: 0,
        };
        let mut quiet = false;
        for _ in 0..20 {
            sm.clock_ms = 0;
            sm.clock_ms = now - sm.next_now();
            let mut acted = 0;
            for _ in 0..10_000 {
                sm.clock_ms = 0;
                sm.clock_ms = now - sm.next_now();
                let Some(page) = next_page(&sm, l) else { break };
                if let command_result::Result::LifecycleScan(r) = sm.ok(Op::LifecycleScan(page)) {
                    acted += r.actions.values().sum::<u64>();
                }
                if stored_scan(&sm).unwrap().phase == scan::PHASE_IDLE {
                    break;
                }
            }
            if acted == 0 {
                quiet = true;
                break;
            }
        }
        assert!(quiet, "seed {seed}: passes never settled");
        let got = model_state(&sm, &written);
        let norm = |s: &std::collections::BTreeMap<String, Vec<MVersion>>| {
            let originals: std::collections::BTreeSet<(String, bool)> =
                before.values().flatten().map(|v| v.id.clone()).collect();
            s.iter()
                .map(|(k, vs)| {
                    let ids: Vec<(String, bool)> = vs
                        .iter()
                        .map(|v| {
                            if originals.contains(&v.id) || v.id.0 == "*new*" {
                                v.id.clone()
                            } else if v.id.0 == "null" {
                                ("null".to_string(), true)
                            } else {
                                ("*new*".to_string(), true)
                            }
                        })
                        .collect();
                    (k.clone(), ids)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            norm(&got),
            norm(&want),
            "seed {seed}: state {state}, rules {rules:?}, now {now}, before {before:#?}"
        );
        assert_eq!(uploads_left(&sm), want_uploads, "seed {seed}: uploads");
    }
}
