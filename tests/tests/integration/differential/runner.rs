//! One run of the differential test: the state it carries, the helpers its
//! operations share, and the loop of random operations, restarts and
//! checkpoints for one seed.

use std::collections::BTreeMap;

use om_client::OmClient;
use om_client::v1::{BucketLayout, KeyConditions, KeyInfo};
use om_tests::TestNode;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::differential::model::{Expect, MKey, MVersion, Model, State};
use crate::differential::{BUCKETS, FS_BUCKET, KEYS, MIN_PART, ids, md5_hex};

pub(crate) struct Run {
    /// Successful and refused requests per operation, to prove the random
    /// sequences reach both paths of every operation.
    tally: BTreeMap<&'static str, (usize, usize)>,
    /// How often each outcome (operation and reason) and each notable case
    /// of the versioning rules came up, to prove the sequences reach them.
    events: BTreeMap<String, usize>,
    pub(crate) rng: StdRng,
    pub(crate) m: Model,
    pub(crate) c: OmClient,
    pub(crate) step: usize,
    seed: u64,
}

impl Run {
    pub(crate) fn ctx(&self) -> String {
        format!("seed {} step {}", self.seed, self.step)
    }

    pub(crate) fn note(&mut self, event: String) {
        *self.events.entry(event).or_default() += 1;
    }

    pub(crate) fn expect_same(
        &mut self,
        what: &'static str,
        got: Result<(), String>,
        want: Expect,
    ) {
        let t = self.tally.entry(what).or_default();
        if got.is_ok() {
            t.0 += 1;
        } else {
            t.1 += 1;
        }
        self.note(format!(
            "{what}: {}",
            got.as_ref().err().map_or("ok", String::as_str)
        ));
        assert_eq!(
            got,
            want.map_err(str::to_string),
            "{}: {what}: om and the model disagree",
            self.ctx()
        );
    }

    pub(crate) fn conditions(&mut self, cur: Option<&MKey>) -> Option<KeyConditions> {
        match self.rng.random_range(0..8) {
            0 => Some(KeyConditions {
                if_none_match_any: true,
                ..Default::default()
            }),
            1 => Some(KeyConditions {
                if_match: cur.map_or_else(|| md5_hex("nothing"), |k| k.etag.clone()),
                ..Default::default()
            }),
            2 => Some(KeyConditions {
                if_match: md5_hex("x"),
                ..Default::default()
            }),
            3 => Some(KeyConditions {
                expected_update_id: cur.map_or(1, |k| {
                    if self.rng.random_bool(0.7) {
                        k.update_id
                    } else {
                        k.update_id + 1
                    }
                }),
                ..Default::default()
            }),
            _ => None,
        }
    }

    pub(crate) fn etag(&mut self) -> String {
        match self.rng.random_range(0..4) {
            0 => String::new(),
            1 => format!("{}-3", md5_hex("mp")),
            n => md5_hex(&format!("e{n}")),
        }
    }

    pub(crate) fn pick_key(&mut self) -> (&'static str, &'static str) {
        (
            *BUCKETS.choose(&mut self.rng).unwrap(),
            *KEYS.choose(&mut self.rng).unwrap(),
        )
    }

    /// Checks the version id om gave a new version (object or delete
    /// marker) of a key in `bucket`: "null" unless versioning is enabled,
    /// else a fresh id, newer than every one before.
    pub(crate) fn check_new_id(&mut self, bucket: &'static str, id: &str) {
        let ctx = self.ctx();
        if self.m.state(bucket) != State::Enabled {
            assert_eq!(id, "null", "{ctx}: version id in {bucket}");
            return;
        }
        let stamp = (id.len() == 16 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| u64::from_str_radix(id, 16).unwrap());
        let newest = self
            .m
            .version_ids
            .last()
            .map(|l| u64::from_str_radix(l, 16).unwrap());
        assert!(
            stamp.is_some_and(|s| Some(s) > newest),
            "{ctx}: version id {id:?} in {bucket} (the newest before: {newest:?})"
        );
        self.m.version_ids.push(id.to_string());
    }

    /// A write of (bucket, key) succeeded with `got`: checks it against
    /// `want` and makes it the key's current version in the model.
    pub(crate) fn learn_write(
        &mut self,
        op: &str,
        bucket: &'static str,
        key: &'static str,
        got: &KeyInfo,
        mut want: MKey,
        keep: bool,
    ) {
        let ctx = self.ctx();
        assert_eq!(
            (got.size, &got.etag, ids(&got.blocks)),
            (want.size, &want.etag, want.blocks.clone()),
            "{ctx}: key {bucket}/{key}"
        );
        assert!(
            got.is_latest && !got.delete_marker,
            "{ctx}: key {bucket}/{key}: {got:?}"
        );
        self.check_new_id(bucket, &got.version_id);
        let state = self.m.state(bucket);
        self.note(format!("{op} ({state:?})"));
        if let Some(i) = self.m.replaced(bucket, key)
            && i > 0
        {
            self.note("a write replaces a noncurrent null version".into());
        }
        if state != State::Unversioned && self.m.current(bucket, key).is_none() {
            if self.m.history(bucket, key).is_empty() {
                self.note(format!("{op} of a new key ({state:?})"));
            } else {
                self.note(format!("{op} over a delete marker ({state:?})"));
            }
        }
        want.update_id = got.update_id;
        let new = MVersion {
            id: got.version_id.clone(),
            marker: false,
            k: want,
        };
        self.m.write(bucket, key, new, keep);
    }
}

/// Waits until the leader's background task purged every deleted directory.
async fn wait_purged(node: &TestNode) {
    om_tests::wait_for(std::time::Duration::from_secs(20), "purge", || async {
        (!node.dump().keys().any(|(t, _)| *t == "deleted_dirs")).then_some(())
    })
    .await;
}

/// (ok, refused) per operation, and how often each event came up.
pub(crate) type Tallies = (
    BTreeMap<&'static str, (usize, usize)>,
    BTreeMap<String, usize>,
);

pub(crate) async fn run_seed(seed: u64, steps: usize, restart_every: usize) -> Tallies {
    let tweak = |a: &mut om::config::Args| {
        a.min_part_size = Some(MIN_PART);
        a.snapshot_every = Some(100);
    };
    let mut node = TestNode::start_with(tweak).await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    for b in BUCKETS {
        c.create_bucket("vol1", b, BucketLayout::ObjectStore)
            .await
            .unwrap();
    }
    c.create_bucket("vol1", FS_BUCKET, BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    let mut run = Run {
        tally: BTreeMap::new(),
        events: BTreeMap::new(),
        rng: StdRng::seed_from_u64(seed),
        m: Model::new(),
        c,
        step: 0,
        seed,
    };
    for step in 0..steps {
        run.step = step;
        match run.rng.random_range(0..163) {
            0..16 => run.put().await,
            16..22 => run.delete().await,
            22..28 => run.delete_many().await,
            28..32 => run.rename().await,
            32..42 => run.open().await,
            42..47 => run.allocate().await,
            47..59 => run.commit().await,
            59..71 => run.copy().await,
            71..77 => run.initiate().await,
            77..87 => run.part().await,
            87..95 => run.complete().await,
            95..99 => run.abort().await,
            99..104 => run.ack().await,
            104..112 => run.fs_mkdir().await,
            112..122 => run.fs_create().await,
            122..130 => run.fs_commit().await,
            130..137 => run.fs_delete().await,
            137..144 => run.fs_rename().await,
            144..147 => run.set_versioning().await,
            147..154 => run.delete_version().await,
            _ => run.lookup().await,
        }
        if step % 25 == 24 {
            wait_purged(&node).await;
            run.check_all().await;
        }
        if step % restart_every == restart_every - 1 {
            // Drop the old connection first, as a client of a restarted
            // server would find it closed.
            run.c = OmClient::connect("127.0.0.1:1").unwrap();
            node = node.restart(tweak).await;
            run.c = node.client();
            wait_purged(&node).await;
            run.check_all().await;
        }
    }
    wait_purged(&node).await;
    run.check_all().await;
    node.node.shutdown().await;
    eprintln!("seed {seed}: (ok, refused) per operation: {:?}", run.tally);
    (run.tally, run.events)
}
