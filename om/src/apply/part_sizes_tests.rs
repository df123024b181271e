//! A multipart object's part sizes (rules 15): CompleteMultipart records
//! the listed parts' sizes in order, and an entry of older rules records
//! none, as it did; a copy is one part.

use om_proto::store::{self as st, KeyRecord, command::Op, command_result};

use crate::apply::LAYOUT_OBJECT_STORE;
use crate::apply::tests::{Sm, setup};
use crate::store::keys;
use crate::store::table::{self, KeyTable};

const ETAG: &str = "0123456789abcdef0123456789abcdef";

/// Uploads parts of `sizes` to `key` and completes them with `rules`.
fn complete(sm: &mut Sm, key: &str, sizes: &[u64], rules: u32) -> KeyRecord {
    let command_result::Result::Upload(u) = sm.ok_rules(
        Op::InitiateMultipart(st::InitiateMultipart {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: key.into(),
            ..Default::default()
        }),
        rules,
    ) else {
        panic!()
    };
    let upload_id = u.upload.unwrap().upload_id;
    let mut parts = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let part_number = i as u32 + 1;
        sm.ok_rules(
            Op::CommitPart(st::CommitPart {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: key.into(),
                upload_id,
                part_number,
                size: *size,
                etag: ETAG.into(),
                block_size: 1 << 20,
                ..Default::default()
            }),
            rules,
        );
        parts.push(st::PartRef {
            part_number,
            etag: ETAG.into(),
        });
    }
    sm.ok_rules(
        Op::CompleteMultipart(st::CompleteMultipart {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: key.into(),
            upload_id,
            parts,
            ..Default::default()
        }),
        rules,
    );
    stored(sm, key)
}

fn stored(sm: &Sm, key: &str) -> KeyRecord {
    table::get::<KeyTable>(&sm.db, &keys::object_key("vol", "bkt", key))
        .unwrap()
        .unwrap()
}

#[test]
fn completed_objects_keep_their_part_sizes() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let rec = complete(&mut sm, "new", &[5 << 20, 5 << 20, 1000], 15);
    assert_eq!(rec.part_sizes, [5 << 20, 5 << 20, 1000]);
    assert_eq!(rec.size, (10 << 20) + 1000);
    let old = complete(&mut sm, "old", &[5 << 20, 7], 14);
    assert!(old.part_sizes.is_empty(), "rules 14 record none");
    sm.ok(Op::CopyKey(st::CopyKey {
        src_volume: "vol".into(),
        src_bucket: "bkt".into(),
        src_key: "new".into(),
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "copy".into(),
        content_md5: "0123456789abcdef0123456789abcdef".into(),
        ..Default::default()
    }));
    assert!(stored(&sm, "copy").part_sizes.is_empty());
}
