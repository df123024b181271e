//! `LocalBlocks` keeps one file per block under a directory, fanned out into
//! 256 subdirectories by the block id's low byte. Every file is written to a
//! temporary name, fsync'd, renamed into place and its directory fsync'd, so
//! a block is either absent or complete, and complete once `put` returns.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::BytesMut;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::{BlockStore, ByteStream, READ_CHUNK};

/// Mode of the block directories: the gateway's user only.
const DIR_MODE: u32 = 0o700;
/// Mode of a block file.
const FILE_MODE: u32 = 0o600;

/// Blocks as files under one directory.
pub struct LocalBlocks {
    root: PathBuf,
}

/// Removes a temporary file unless it was renamed into place.
struct TempFile(Option<PathBuf>);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl LocalBlocks {
    /// Opens (creating if needed) a block directory. Objects' data is for
    /// the gateway's user only: the directories are 0700 (also those an
    /// older gateway made 0755) and every block file 0600.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<LocalBlocks> {
        use std::os::unix::fs::DirBuilderExt;
        let root = root.into();
        let mut dirs = std::fs::DirBuilder::new();
        dirs.recursive(true).mode(DIR_MODE);
        dirs.create(&root)?;
        tighten(&root)?;
        for i in 0..=255u8 {
            let sub = root.join(format!("{i:02x}"));
            dirs.create(&sub)?;
            tighten(&sub)?;
        }
        Ok(LocalBlocks { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn block_path(&self, id: u64) -> PathBuf {
        self.root
            .join(format!("{:02x}", id & 0xff))
            .join(format!("{id:016x}"))
    }

    /// Writes `data` to a temporary file in `dir`, fsync'd; the guard
    /// removes it unless it is renamed.
    async fn write_temp(
        &self,
        dir: &Path,
        mut data: ByteStream<'_>,
    ) -> io::Result<(TempFile, u64)> {
        let tmp = dir.join(format!(".tmp-{:032x}", rand::random::<u128>()));
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)
            .await?;
        let guard = TempFile(Some(tmp));
        let mut n = 0u64;
        while let Some(chunk) = data.next().await {
            let chunk = chunk?;
            f.write_all(&chunk).await?;
            n += chunk.len() as u64;
        }
        f.flush().await?;
        f.sync_all().await?;
        Ok((guard, n))
    }

    /// Renames the guarded temporary file to `to` and fsyncs the directory.
    async fn install(mut guard: TempFile, to: &Path) -> io::Result<()> {
        let Some(tmp) = guard.0.as_ref() else {
            return Err(io::Error::other("temporary file already installed"));
        };
        tokio::fs::rename(tmp, to).await?;
        guard.0 = None;
        sync_dir(to).await
    }
}

/// Makes the directory `dir` the gateway's user's only. One the gateway
/// does not own (a volume's mount point given as the store itself) is left
/// as it is, with a warning.
fn tighten(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            tracing::warn!(dir = %dir.display(), "block directory is not the gateway user's: its mode is left as it is");
            Ok(())
        }
        r => r,
    }
}

/// Fsyncs the directory holding `path`, so a rename into it is durable.
async fn sync_dir(path: &Path) -> io::Result<()> {
    let Some(dir) = path.parent().map(Path::to_path_buf) else {
        return Ok(());
    };
    tokio::task::spawn_blocking(move || std::fs::File::open(dir)?.sync_all())
        .await
        .map_err(io::Error::other)?
}

/// `len` bytes of the file at `path` from `offset`, in chunks.
async fn read_range(path: PathBuf, offset: u64, len: u64) -> io::Result<ByteStream<'static>> {
    let mut f = tokio::fs::File::open(&path).await?;
    let size = f.metadata().await?.len();
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{} holds {size} bytes, {len} wanted from {offset}",
                path.display()
            ),
        ));
    }
    f.seek(io::SeekFrom::Start(offset)).await?;
    let s = futures::stream::try_unfold((f, len), |(mut f, left)| async move {
        if left == 0 {
            return Ok(None);
        }
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(READ_CHUNK);
        let mut buf = BytesMut::with_capacity(want);
        while buf.len() < want {
            let mut limited = (&mut f).take((want - buf.len()) as u64);
            if limited.read_buf(&mut buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "block file ended early",
                ));
            }
        }
        let n = buf.len() as u64;
        Ok(Some((buf.freeze(), (f, left - n))))
    });
    Ok(s.boxed())
}

async fn remove_if_present(path: &Path) -> io::Result<()> {
    match tokio::fs::remove_file(path).await {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[async_trait]
impl BlockStore for LocalBlocks {
    async fn put(&self, id: u64, data: ByteStream<'_>) -> io::Result<u64> {
        let path = self.block_path(id);
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        let (tmp, n) = self.write_temp(&dir, data).await?;
        Self::install(tmp, &path).await?;
        Ok(n)
    }

    async fn get(&self, id: u64, offset: u64, len: u64) -> io::Result<ByteStream<'static>> {
        read_range(self.block_path(id), offset, len).await
    }

    async fn delete(&self, id: u64) -> io::Result<()> {
        remove_if_present(&self.block_path(id)).await
    }

    async fn sweep(&self, age: Duration) -> io::Result<usize> {
        let mut removed = 0;
        for i in 0..=255u8 {
            let dir = self.root.join(format!("{i:02x}"));
            removed += sweep_dir(&dir, age, |name| name.starts_with(".tmp-")).await?;
        }
        Ok(removed)
    }
}

/// Removes the files of `dir` whose name passes `pick`, last modified at
/// least `age` ago.
async fn sweep_dir(dir: &Path, age: Duration, pick: impl Fn(&str) -> bool) -> io::Result<usize> {
    let mut removed = 0;
    let mut entries = tokio::fs::read_dir(dir).await?;
    let now = SystemTime::now();
    while let Some(e) = entries.next_entry().await? {
        if !e.file_name().to_str().is_some_and(&pick) {
            continue;
        }
        let modified = e.metadata().await?.modified()?;
        if now.duration_since(modified).unwrap_or_default() >= age {
            remove_if_present(&e.path()).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::TryStreamExt;

    fn chunks(parts: &[&'static [u8]]) -> ByteStream<'static> {
        futures::stream::iter(
            parts
                .iter()
                .map(|p| Ok(Bytes::from_static(p)))
                .collect::<Vec<_>>(),
        )
        .boxed()
    }

    async fn collect(s: ByteStream<'static>) -> io::Result<Vec<u8>> {
        let parts: Vec<Bytes> = s.try_collect().await?;
        Ok(parts.concat())
    }

    /// Block files are 0600 and the directories 0700, whatever the umask,
    /// and directories an older gateway made 0755 are tightened on open.
    #[tokio::test]
    async fn blocks_are_for_the_gateways_user_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("blocks");
        std::fs::create_dir_all(root.join("07")).unwrap();
        for d in [&root, &root.join("07")] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let s = LocalBlocks::open(&root).unwrap();
        s.put(0x107, chunks(&[b"secret"])).await.unwrap();
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("07")), 0o700);
        assert_eq!(mode(&root.join("ff")), 0o700);
        assert_eq!(mode(&root.join("07").join("0000000000000107")), 0o600);
    }

    #[tokio::test]
    async fn put_get_ranges_delete() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalBlocks::open(dir.path()).unwrap();
        let n = s.put(0x1234, chunks(&[b"hello ", b"world"])).await.unwrap();
        assert_eq!(n, 11);
        assert!(dir.path().join("34").join("0000000000001234").exists());
        assert_eq!(
            collect(s.get(0x1234, 0, 11).await.unwrap()).await.unwrap(),
            b"hello world"
        );
        assert_eq!(
            collect(s.get(0x1234, 6, 5).await.unwrap()).await.unwrap(),
            b"world"
        );
        assert_eq!(
            collect(s.get(0x1234, 11, 0).await.unwrap()).await.unwrap(),
            b""
        );
        // Past the end, and a missing block, fail before any data.
        assert!(s.get(0x1234, 6, 6).await.is_err());
        assert_eq!(
            s.get(7, 0, 1).await.err().map(|e| e.kind()),
            Some(io::ErrorKind::NotFound)
        );
        s.delete(0x1234).await.unwrap();
        s.delete(0x1234).await.unwrap();
        assert!(s.get(0x1234, 0, 1).await.is_err());
    }

    #[tokio::test]
    async fn large_reads_come_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalBlocks::open(dir.path()).unwrap();
        let data: Vec<u8> = (0..(READ_CHUNK * 2 + 17))
            .map(|i| (i % 251) as u8)
            .collect();
        let body = futures::stream::iter(
            data.chunks(1000)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        )
        .boxed();
        assert_eq!(s.put(1, body).await.unwrap(), data.len() as u64);
        let parts: Vec<Bytes> = s
            .get(1, 0, data.len() as u64)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert!(parts.iter().all(|p| p.len() <= READ_CHUNK));
        assert_eq!(parts.concat(), data);
        let tail = collect(s.get(1, 5, data.len() as u64 - 5).await.unwrap())
            .await
            .unwrap();
        assert_eq!(tail, data[5..]);
    }

    #[tokio::test]
    async fn failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalBlocks::open(dir.path()).unwrap();
        let body = futures::stream::iter(vec![
            Ok(Bytes::from_static(b"partial")),
            Err(io::Error::other("client went away")),
        ])
        .boxed();
        assert!(s.put(9, body).await.is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path().join("09")).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(s.get(9, 0, 0).await.is_err());
    }

    #[tokio::test]
    async fn sweep_removes_old_unfinished_writes_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalBlocks::open(dir.path()).unwrap();
        s.put(5, chunks(&[b"kept"])).await.unwrap();
        std::fs::write(dir.path().join("05").join(".tmp-left"), b"z").unwrap();
        assert_eq!(s.sweep(Duration::from_secs(3600)).await.unwrap(), 0);
        assert_eq!(s.sweep(Duration::ZERO).await.unwrap(), 1);
        assert!(!dir.path().join("05").join(".tmp-left").exists());
        assert_eq!(
            collect(s.get(5, 0, 4).await.unwrap()).await.unwrap(),
            b"kept"
        );
    }
}
