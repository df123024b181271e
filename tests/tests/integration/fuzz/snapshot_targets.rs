//! The snapshot RPCs' fuzz targets (`rpcs::targets` adds them): reads at
//! and of the fixture's snapshot `snap1` of `vol1/bkt1`, and the writes.

use super::*;

pub(super) fn snapshot_targets() -> Vec<Target> {
    vec![
        target!(
            "LookupKey(snapshot)",
            lookup_key,
            LookupKeyRequest,
            false,
            LookupKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "b".into(),
                snapshot: "snap1".into(),
                ..Default::default()
            }
        ),
        target!(
            "ListKeys(snapshot)",
            list_keys,
            ListKeysRequest,
            false,
            ListKeysRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                prefix: "a".into(),
                delimiter: "/".into(),
                max_keys: 2,
                snapshot: "snap1".into(),
                ..Default::default()
            }
        ),
        target!(
            "GetSnapshot",
            get_snapshot,
            GetSnapshotRequest,
            false,
            GetSnapshotRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                name: "snap1".into(),
                ..Default::default()
            }
        ),
        target!(
            "ListSnapshots",
            list_snapshots,
            ListSnapshotsRequest,
            false,
            ListSnapshotsRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                start_after: "a".into(),
                max_results: 1,
                ..Default::default()
            }
        ),
        target!(
            "SnapshotDiff",
            snapshot_diff,
            SnapshotDiffRequest,
            false,
            SnapshotDiffRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                from: "snap1".into(),
                max_results: 1,
                ..Default::default()
            }
        ),
        target!(
            "CreateSnapshot",
            create_snapshot,
            CreateSnapshotRequest,
            true,
            CreateSnapshotRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                name: "snap2".into(),
                ..Default::default()
            }
        ),
        target!(
            "RenameSnapshot",
            rename_snapshot,
            RenameSnapshotRequest,
            true,
            RenameSnapshotRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                name: "snap1".into(),
                new_name: "snap3".into(),
                ..Default::default()
            }
        ),
        target!(
            "DeleteSnapshot",
            delete_snapshot,
            DeleteSnapshotRequest,
            true,
            DeleteSnapshotRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                name: "snap1".into(),
                ..Default::default()
            }
        ),
    ]
}
