//! Typed access to the metadata tables: each table names its column family and
//! its stored record type, and every read and write goes through here, so no
//! handler touches raw bytes or RocksDB directly.

use om_raft_store::{EntryWrites, ViewValue};
use prost::Message;
use rocksdb::{ColumnFamily, DB, WriteBatch};

pub use super::view::StateRead;

use super::keys;
use crate::error::OmError;
use om_proto::store::{
    BucketRecord, ClusterAclRecord, ClusterIdRecord, DeletedBlocksRecord, DeletedDirRecord,
    DirectoryRecord, KeyRecord, LifecycleRecord, LifecycleScanRecord, OpenKeyRecord, PartRecord,
    RetryCacheRecord, S3SecretRecord, SnapshotRecord, UploadRecord, VolumeRecord,
};

/// A stored record with a format version, bumped when its meaning changes.
pub trait Record: Message + Default {
    fn set_format(&mut self, format: u32);
}

macro_rules! record {
    ($($t:ty),*) => {$(
        impl Record for $t {
            fn set_format(&mut self, format: u32) {
                self.format = format;
            }
        }
    )*};
}
record!(
    VolumeRecord,
    BucketRecord,
    KeyRecord,
    DeletedBlocksRecord,
    RetryCacheRecord,
    OpenKeyRecord,
    UploadRecord,
    PartRecord,
    DirectoryRecord,
    DeletedDirRecord,
    ClusterAclRecord,
    ClusterIdRecord,
    LifecycleRecord,
    LifecycleScanRecord,
    S3SecretRecord,
    SnapshotRecord
);

/// One metadata table: a column family and the record stored in it.
pub trait TableSchema {
    const CF: &'static str;
    /// The format version written today.
    const FORMAT: u32 = 1;
    type Value: Record;
}

macro_rules! table {
    ($name:ident, $cf:expr, $value:ty, $doc:literal) => {
        #[doc = $doc]
        pub struct $name;
        impl TableSchema for $name {
            const CF: &'static str = $cf;
            type Value = $value;
        }
    };
}

table!(
    VolumeTable,
    keys::VOLUMES_CF,
    VolumeRecord,
    "Volumes by name."
);
table!(
    BucketTable,
    keys::BUCKETS_CF,
    BucketRecord,
    "Buckets by `volume/bucket`."
);
table!(
    KeyTable,
    keys::KEYS_CF,
    KeyRecord,
    "Committed keys of OBJECT_STORE buckets."
);
table!(
    DeletedBlocksTable,
    keys::DELETED_BLOCKS_CF,
    DeletedBlocksRecord,
    "Blocks awaiting reclamation, in release order."
);
table!(
    RetryCacheTable,
    keys::RETRY_CACHE_CF,
    RetryCacheRecord,
    "Results of recent writes by (client id, sequence number)."
);

table!(
    OpenKeyTable,
    keys::OPEN_KEYS_CF,
    OpenKeyRecord,
    "Keys being written, one entry per writer session."
);
table!(
    UploadTable,
    keys::UPLOADS_CF,
    UploadRecord,
    "In-progress multipart uploads by key and upload id."
);
table!(
    PartTable,
    keys::PARTS_CF,
    PartRecord,
    "Uploaded parts by upload id and part number."
);

table!(
    DirectoryTable,
    keys::DIRECTORIES_CF,
    DirectoryRecord,
    "Directories of FSO buckets by parent id and name."
);
table!(
    FileTable,
    keys::FILES_CF,
    KeyRecord,
    "Committed files of FSO buckets by parent id and name."
);
table!(
    OpenFileTable,
    keys::OPEN_FILES_CF,
    OpenKeyRecord,
    "Files being written in FSO buckets, one entry per session."
);
table!(
    DeletedDirTable,
    keys::DELETED_DIRS_CF,
    DeletedDirRecord,
    "Directories deleted recursively, awaiting purge."
);

table!(
    SettingsTable,
    keys::SETTINGS_CF,
    ClusterAclRecord,
    "Cluster-wide settings: the cluster ACL (`keys::CLUSTER_ACL_KEY`)."
);
table!(
    ClusterIdTable,
    keys::SETTINGS_CF,
    ClusterIdRecord,
    "Cluster-wide settings: the cluster's id (`keys::CLUSTER_ID_KEY`)."
);

table!(
    LifecycleTable,
    keys::LIFECYCLE_CF,
    LifecycleRecord,
    "Buckets' lifecycle configurations, under the bucket's key."
);

table!(
    LifecycleScanTable,
    keys::LIFECYCLE_SCAN_CF,
    LifecycleScanRecord,
    "Where each bucket's lifecycle scan stands, under the bucket's key."
);

table!(
    S3SecretTable,
    keys::S3_SECRETS_CF,
    S3SecretRecord,
    "S3 credentials by access key, and an index by user (`keys::s3_user_prefix`)."
);

table!(
    SnapshotTable,
    keys::SNAPSHOTS_CF,
    SnapshotRecord,
    "Buckets' snapshots by name (live) and by index (deleted, being reclaimed)."
);
table!(
    RetainedKeyTable,
    keys::SNAPSHOT_KEYS_CF,
    KeyRecord,
    "`keys` entries that left the table while a snapshot showed them."
);

pub fn cf<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily, OmError> {
    db.cf_handle(name)
        .ok_or_else(|| OmError::Internal(format!("column family {name} missing")))
}

/// Where writes are staged: an entry's writes in apply (`EntryWrites`), or
/// a plain batch (tests, and stores written outside Raft).
pub trait Writes {
    fn put_owned(&mut self, cf: &ColumnFamily, key: &[u8], value: Vec<u8>);
    fn delete_key(&mut self, cf: &ColumnFamily, key: &[u8]);
}

impl Writes for WriteBatch {
    fn put_owned(&mut self, cf: &ColumnFamily, key: &[u8], value: Vec<u8>) {
        self.put_cf(cf, key, value);
    }
    fn delete_key(&mut self, cf: &ColumnFamily, key: &[u8]) {
        self.delete_cf(cf, key);
    }
}

impl Writes for EntryWrites<'_> {
    fn put_owned(&mut self, cf: &ColumnFamily, key: &[u8], value: Vec<u8>) {
        self.put_cf_vec(cf, key.to_vec(), value);
    }
    fn delete_key(&mut self, cf: &ColumnFamily, key: &[u8]) {
        self.delete_cf(cf, key);
    }
}

/// A point read of `key` in the column family `name`, as `db` sees it.
pub fn get_raw<'a, S: StateRead + ?Sized>(
    db: &'a S,
    name: &str,
    key: &[u8],
) -> Result<Option<ViewValue<'a>>, OmError> {
    db.read(name, cf(db.rocks(), name)?, key)
}

/// A point read of one record.
pub fn get<T: TableSchema>(
    db: &(impl StateRead + ?Sized),
    key: &[u8],
) -> Result<Option<T::Value>, OmError> {
    match get_raw(db, T::CF, key)? {
        Some(bytes) => Ok(Some(decode::<T>(&bytes)?)),
        None => Ok(None),
    }
}

pub fn decode<T: TableSchema>(bytes: &[u8]) -> Result<T::Value, OmError> {
    T::Value::decode(bytes).map_err(|e| OmError::Internal(format!("corrupt {} record: {e}", T::CF)))
}

/// Stages a write of one record, stamping the current format version.
pub fn put<T: TableSchema>(
    db: &(impl StateRead + ?Sized),
    batch: &mut impl Writes,
    key: &[u8],
    value: &mut T::Value,
) -> Result<(), OmError> {
    value.set_format(T::FORMAT);
    batch.put_owned(cf(db.rocks(), T::CF)?, key, value.encode_to_vec());
    Ok(())
}

pub fn delete<T: TableSchema>(
    db: &(impl StateRead + ?Sized),
    batch: &mut impl Writes,
    key: &[u8],
) -> Result<(), OmError> {
    batch.delete_key(cf(db.rocks(), T::CF)?, key);
    Ok(())
}

/// Reads a big-endian u64 counter; absent counters read as `default`.
pub fn get_counter(
    db: &(impl StateRead + ?Sized),
    name: &[u8],
    default: u64,
) -> Result<u64, OmError> {
    match get_raw(db, keys::COUNTERS_CF, name)? {
        Some(b) => {
            Ok(u64::from_be_bytes((&*b).try_into().map_err(|_| {
                OmError::Internal("corrupt counter".to_string())
            })?))
        }
        None => Ok(default),
    }
}

pub fn put_counter(
    db: &(impl StateRead + ?Sized),
    batch: &mut impl Writes,
    name: &[u8],
    v: u64,
) -> Result<(), OmError> {
    batch.put_owned(
        cf(db.rocks(), keys::COUNTERS_CF)?,
        name,
        v.to_be_bytes().to_vec(),
    );
    Ok(())
}
