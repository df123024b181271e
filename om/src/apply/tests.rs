use super::*;
use om_proto::store::BlockRecord;

#[test]
fn object_ids_are_unique_per_entry() {
    assert_ne!(object_id(1, 0), object_id(1, 1));
    assert_ne!(object_id(1, 255), object_id(2, 0));
}

/// A stand-in for a request's digest: its operation's encoding.
pub(super) fn request_digest(op: &Op) -> Vec<u8> {
    use prost::Message;
    Command {
        op: Some(op.clone()),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Applies commands one entry at a time, as the state machine does.
pub(super) struct Sm {
    _dir: tempfile::TempDir,
    pub db: rocksdb::DB,
    /// The database's options, which hold its statistics.
    opts: rocksdb::Options,
    index: u64,
    /// Added to every command's time: tests move the clock with it.
    pub clock_ms: u64,
}

impl Sm {
    pub fn new() -> Sm {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        o.enable_statistics();
        let db = rocksdb::DB::open_cf(&o, dir.path(), keys::TABLE_CFS).unwrap();
        Sm {
            _dir: dir,
            db,
            opts: o,
            index: 0,
            clock_ms: 0,
        }
    }

    /// The result, and how many writes the entry staged; stamped with
    /// this binary's rules, as a leader stamps it.
    pub fn apply(&mut self, op: Op) -> (CommandResult, usize) {
        self.apply_rules(op, RULES)
    }

    /// Applies `writes` as one batch entry, each write stamped with `rules`
    /// and, when `client` is given, that client id and seqs 1, 2, ...: the
    /// entry's result (one per write) and how many writes it staged.
    pub fn apply_batch(
        &mut self,
        writes: Vec<Op>,
        rules: u32,
        client: Option<&str>,
    ) -> (CommandResult, usize) {
        self.index += 1;
        let now_ms = 1000 + self.index + self.clock_ms;
        let batch = (1..)
            .zip(writes)
            .map(|(seq, op)| Command {
                now_ms,
                request_digest: request_digest(&op),
                op: Some(op),
                rules,
                client_id: client.unwrap_or_default().to_string(),
                seq: if client.is_some() { seq } else { 0 },
                ..Default::default()
            })
            .collect();
        let cmd = Command {
            rules: RULES,
            batch,
            ..Default::default()
        };
        apply_alone(&self.db, self.index, &cmd).unwrap()
    }

    /// Applies `cmd` as it is, as the next entry.
    pub fn apply_raw(&mut self, cmd: &Command) -> (CommandResult, usize) {
        self.index += 1;
        apply_alone(&self.db, self.index, cmd).unwrap()
    }

    /// The log index the next command will be applied at.
    pub fn next_index(&self) -> u64 {
        self.index + 1
    }

    /// `apply` of a command stamped with `rules` (0: an old log entry).
    pub fn apply_rules(&mut self, op: Op, rules: u32) -> (CommandResult, usize) {
        self.index += 1;
        let cmd = Command {
            now_ms: 1000 + self.index + self.clock_ms,
            op: Some(op),
            rules,
            ..Default::default()
        };
        apply_alone(&self.db, self.index, &cmd).unwrap()
    }

    pub fn ok(&mut self, op: Op) -> command_result::Result {
        into_outcome(self.apply(op).0).unwrap()
    }

    /// `apply` of a command proposed for `user` (not an admin).
    pub fn apply_as(&mut self, user: &str, op: Op) -> (CommandResult, usize) {
        self.index += 1;
        let cmd = Command {
            now_ms: 1000 + self.index,
            op: Some(op),
            rules: RULES,
            caller: Some(om_proto::store::Caller {
                user: user.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        };
        apply_alone(&self.db, self.index, &cmd).unwrap()
    }

    /// Point reads (`Get`s) of the database so far.
    pub fn keys_read(&self) -> u64 {
        self.opts
            .get_ticker_count(rocksdb::statistics::Ticker::NumberKeysRead)
    }

    /// The time the next command will carry.
    pub fn next_now(&self) -> u64 {
        1000 + self.index + 1 + self.clock_ms
    }

    pub fn ok_rules(&mut self, op: Op, rules: u32) -> command_result::Result {
        into_outcome(self.apply_rules(op, rules).0).unwrap()
    }

    pub fn rejected(&mut self, op: Op) -> String {
        self.rejected_rules(op, RULES)
    }

    pub fn rejected_rules(&mut self, op: Op, rules: u32) -> String {
        let (r, staged) = self.apply_rules(op, rules);
        assert_eq!(staged, 0, "a rejected command staged writes");
        match into_outcome(r) {
            Err(OmError::Request { reason, .. }) => reason,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
}

use om_proto::store as st;

/// Sets vol/bkt's versioning to `v`.
pub(super) fn versioning(sm: &mut Sm, v: u32) {
    sm.ok(Op::SetBucketVersioning(st::SetBucketVersioning {
        volume: "vol".into(),
        bucket: "bkt".into(),
        versioning: v,
    }));
}

pub(super) fn setup(sm: &mut Sm, layout: u32) {
    sm.ok(Op::CreateVolume(st::CreateVolume {
        name: "vol".into(),
        ..Default::default()
    }));
    sm.ok(Op::CreateBucket(st::CreateBucket {
        volume: "vol".into(),
        name: "bkt".into(),
        layout,
        ..Default::default()
    }));
}

/// A write to an existing bucket reads the bucket but not its volume to
/// learn that the volume exists (a bucket never outlives its volume); the
/// volume is read once, for its usage. A missing bucket still names what
/// is missing.
#[test]
fn a_put_reads_its_volume_once() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let put = |volume: &str, bucket: &str, key: &str| {
        Op::PutKey(st::PutKey {
            volume: volume.into(),
            bucket: bucket.into(),
            key: key.into(),
            size: 10,
            ..Default::default()
        })
    };
    sm.ok(put("vol", "bkt", "a"));
    let before = sm.keys_read();
    sm.ok(put("vol", "bkt", "b"));
    // The bucket, the key's current version, the block id counter and
    // the volume (its used bytes).
    assert_eq!(sm.keys_read() - before, 4);
    assert_eq!(sm.rejected(put("nope", "bkt", "c")), "VOLUME_NOT_FOUND");
    assert_eq!(sm.rejected(put("vol", "nope", "c")), "BUCKET_NOT_FOUND");
}

/// Apply decides rights from the state as of the entry: a grant lets a
/// user write, its removal stops the next command, and a refusal stages
/// nothing; a bucket belongs to whoever created it.
#[test]
fn apply_checks_the_callers_rights_against_the_acl_of_its_entry() {
    let mut sm = Sm::new();
    sm.ok(Op::CreateVolume(st::CreateVolume {
        name: "vol".into(),
        owner: "alice".into(),
        ..Default::default()
    }));
    let (r, _) = sm.apply_as(
        "alice",
        Op::CreateBucket(st::CreateBucket {
            volume: "vol".into(),
            name: "bkt".into(),
            ..Default::default()
        }),
    );
    match into_outcome(r).unwrap() {
        command_result::Result::Bucket(b) => assert_eq!(b.owner, "alice"),
        other => panic!("{other:?}"),
    }
    let put = || {
        Op::PutKey(st::PutKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            ..Default::default()
        })
    };
    let denied = |sm: &mut Sm| {
        let (r, staged) = sm.apply_as("bob", put());
        assert_eq!(staged, 0, "a refused command staged writes");
        match into_outcome(r) {
            Err(OmError::Denied {
                right, resource, ..
            }) => assert_eq!((right.as_str(), resource.as_str()), ("WRITE", "/vol/bkt")),
            other => panic!("expected ACCESS_DENIED, got {other:?}"),
        }
    };
    denied(&mut sm);
    let grant = |mode| {
        Op::SetAcl(st::SetAcl {
            volume: "vol".into(),
            bucket: "bkt".into(),
            mode,
            grants: vec![st::AclGrant {
                kind: crate::authz::KIND_USER,
                name: "bob".into(),
                rights: crate::authz::WRITE,
            }],
        })
    };
    // bob may not grant himself anything.
    let (r, staged) = sm.apply_as("bob", grant(1));
    assert!(matches!(into_outcome(r), Err(OmError::Denied { .. })) && staged == 0);
    into_outcome(sm.apply_as("alice", grant(1)).0).unwrap();
    into_outcome(sm.apply_as("bob", put()).0).unwrap();
    into_outcome(sm.apply_as("alice", grant(2)).0).unwrap();
    denied(&mut sm);
    // Commands without a caller (internal, or authentication off) pass.
    sm.ok(put());
}

/// Checks the edge also makes are repeated at apply, so a replicated
/// command on its own cannot corrupt state.
#[test]
fn apply_refuses_parts_out_of_order_on_its_own() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let command_result::Result::Upload(u) = sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        ..Default::default()
    })) else {
        panic!("no upload")
    };
    let id = u.upload.unwrap().upload_id;
    let etag = "0cc175b9c0f1b6a831c399e269772661".to_string();
    sm.ok(Op::CommitPart(st::CommitPart {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        upload_id: id,
        part_number: 1,
        size: 10,
        etag: etag.clone(),
        ..Default::default()
    }));
    let part = st::PartRef {
        part_number: 1,
        etag,
    };
    let reason = sm.rejected(Op::CompleteMultipart(st::CompleteMultipart {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        upload_id: id,
        parts: vec![part.clone(), part],
        ..Default::default()
    }));
    assert_eq!(reason, "INVALID_PART_ORDER");
}

#[test]
fn apply_refuses_moving_a_directory_under_itself() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_FSO);
    sm.ok(Op::CreateDirectory(st::CreateDirectory {
        volume: "vol".into(),
        bucket: "bkt".into(),
        path: "a/x".into(),
    }));
    for to in ["a/x/y", "a/y"] {
        let reason = sm.rejected(Op::RenamePath(st::RenamePath {
            volume: "vol".into(),
            bucket: "bkt".into(),
            from: "a".into(),
            to: to.into(),
            ..Default::default()
        }));
        assert_eq!(reason, "RENAME_INTO_ITSELF", "{to}");
    }
    // A sibling target is fine.
    sm.ok(Op::RenamePath(st::RenamePath {
        volume: "vol".into(),
        bucket: "bkt".into(),
        from: "a".into(),
        to: "b".into(),
        ..Default::default()
    }));
}

#[test]
fn a_block_released_twice_in_one_command_is_an_error() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let tables = state_tables(&sm.db).unwrap();
    let overlay = om_raft_store::Overlay::new(&tables);
    let view = ApplyView::new(&sm.db, &tables, &overlay);
    let ctx = Ctx {
        db: &view,
        index: 99,
        slot: None,
        now: 0,
        rules: RULES,
        caller: None,
        holders: RefCell::new(HashMap::new()),
        staged_keys: RefCell::default(),
        retired: RefCell::default(),
        changed: RefCell::default(),
        versions_made: std::cell::Cell::new(0),
    };
    let mut b = EntryWrites::new(&tables);
    let blk = BlockRecord {
        block_id: 7,
        offset: 0,
        length: 1,
    };
    ctx.release_blocks(&mut b, 0, vec![blk], String::new())
        .unwrap();
    assert!(
        ctx.release_blocks(&mut b, 1, vec![blk], String::new())
            .is_err()
    );
}

/// A part committed from a write session takes the blocks the data was
/// written to (rules 9): the session closes, its unlisted blocks are freed,
/// and blocks it was never given are refused with nothing staged.
#[test]
fn parts_take_the_blocks_of_their_write_session() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let command_result::Result::Upload(u) = sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        ..Default::default()
    })) else {
        panic!("no upload")
    };
    let upload_id = u.upload.unwrap().upload_id;
    let command_result::Result::OpenKey(s) = sm.ok(Op::OpenKey(st::OpenKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        blocks: 2,
        block_size: 1 << 20,
        ..Default::default()
    })) else {
        panic!("no session")
    };
    let (first, second) = (s.blocks[0].block_id, s.blocks[1].block_id);
    let part = |blocks: Vec<st::BlockRecord>, size: u64| {
        Op::CommitPart(st::CommitPart {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            upload_id,
            part_number: 1,
            size,
            etag: "0cc175b9c0f1b6a831c399e269772661".into(),
            block_size: 1 << 20,
            session_id: s.session_id,
            blocks,
        })
    };
    let block = |block_id, length| st::BlockRecord {
        block_id,
        offset: 0,
        length,
    };
    assert_eq!(
        sm.rejected_rules(part(vec![block(first, 10)], 10), 8),
        "UNSUPPORTED_COMMAND"
    );
    assert_eq!(
        sm.rejected(part(vec![block(first + 1000, 10)], 10)),
        "INVALID_BLOCKS"
    );
    assert_eq!(
        sm.rejected(part(vec![block(first, 10)], 11)),
        "SIZE_MISMATCH"
    );
    let deleted_before = crate::store::dump_table(&sm.db, keys::DELETED_BLOCKS_CF)
        .unwrap()
        .len();
    let command_result::Result::Part(p) = sm.ok(part(vec![block(first, 10)], 10)) else {
        panic!("no part")
    };
    assert_eq!(p.part.unwrap().blocks, vec![block(first, 10)]);
    // The session is closed and its unused block released.
    let open = crate::store::dump_table(&sm.db, keys::OPEN_KEYS_CF).unwrap();
    assert!(open.is_empty(), "{open:?}");
    let deleted = crate::store::dump_table(&sm.db, keys::DELETED_BLOCKS_CF).unwrap();
    assert_eq!(deleted.len(), deleted_before + 1);
    assert!(deleted.values().any(|v| {
        <om_proto::store::DeletedBlocksRecord as prost::Message>::decode(v.as_slice())
            .is_ok_and(|r| r.blocks.iter().any(|b| b.block_id == second))
    }));
    let bucket = table::get::<BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
        .unwrap()
        .unwrap();
    assert_eq!(bucket.open_key_count, 0);
    // The session cannot be used twice.
    assert_eq!(
        sm.rejected(part(vec![block(first, 10)], 10)),
        "SESSION_NOT_FOUND"
    );
}

/// AbortKey (rules 9) closes a session uncommitted: every block it was
/// given is released, the key is untouched, the bucket counts no open key.
#[test]
fn an_aborted_session_releases_its_blocks() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let command_result::Result::OpenKey(s) = sm.ok(Op::OpenKey(st::OpenKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        blocks: 2,
        block_size: 1 << 20,
        ..Default::default()
    })) else {
        panic!("no session")
    };
    let abort = || {
        Op::AbortKey(st::AbortKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            session_id: s.session_id,
        })
    };
    assert_eq!(sm.rejected_rules(abort(), 8), "UNSUPPORTED_COMMAND");
    let before = crate::store::dump_table(&sm.db, keys::DELETED_BLOCKS_CF).unwrap();
    sm.ok(abort());
    assert!(
        crate::store::dump_table(&sm.db, keys::OPEN_KEYS_CF)
            .unwrap()
            .is_empty()
    );
    let after = crate::store::dump_table(&sm.db, keys::DELETED_BLOCKS_CF).unwrap();
    let released: Vec<u64> = after
        .iter()
        .filter(|(k, _)| !before.contains_key(*k))
        .flat_map(|(_, v)| {
            <om_proto::store::DeletedBlocksRecord as prost::Message>::decode(v.as_slice())
                .unwrap()
                .blocks
        })
        .map(|b| b.block_id)
        .collect();
    let mut given: Vec<u64> = s.blocks.iter().map(|b| b.block_id).collect();
    given.sort();
    let mut released = released;
    released.sort();
    assert_eq!(released, given);
    let bucket = table::get::<BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
        .unwrap()
        .unwrap();
    assert_eq!((bucket.open_key_count, bucket.key_count), (0, 0));
    assert_eq!(sm.rejected(abort()), "SESSION_NOT_FOUND");
}
