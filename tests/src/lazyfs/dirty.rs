//! A file's data written and not yet synced, as `lazyfs` holds it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The unit unsynced data is kept and lost in.
pub const PAGE: u64 = 4096;

/// A file's data not yet synced: whole pages over the underlying file's
/// (read from it when first written in part), and the size the writer sees.
pub struct Dirty {
    pub file: File,
    pub pages: BTreeMap<u64, Vec<u8>>,
    pub size: u64,
}

impl Dirty {
    /// Nothing unsynced yet over `file`.
    pub fn open(file: File) -> io::Result<Dirty> {
        let size = file.metadata()?.len();
        Ok(Dirty {
            file,
            pages: BTreeMap::new(),
            size,
        })
    }

    fn page(&mut self, n: u64) -> io::Result<&mut Vec<u8>> {
        if !self.pages.contains_key(&n) {
            let mut buf = vec![0u8; PAGE as usize];
            let mut at = 0;
            // The underlying bytes of the page (zeros past its end).
            while at < buf.len() {
                match self.file.read_at(&mut buf[at..], n * PAGE + at as u64)? {
                    0 => break,
                    k => at += k,
                }
            }
            self.pages.insert(n, buf);
        }
        Ok(self.pages.get_mut(&n).expect("just inserted"))
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let (n, within) = (at / PAGE, (at % PAGE) as usize);
            let k = (PAGE as usize - within).min(data.len() - done);
            self.page(n)?[within..within + k].copy_from_slice(&data[done..done + k]);
            done += k;
        }
        self.size = self.size.max(offset + data.len() as u64);
        Ok(())
    }

    pub fn read(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let end = self.size.min(offset + len as u64);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let (n, within) = (at / PAGE, (at % PAGE) as usize);
            let k = ((PAGE as usize - within) as u64).min(end - at) as usize;
            match self.pages.get(&n) {
                Some(p) => out.extend_from_slice(&p[within..within + k]),
                None => {
                    let mut buf = vec![0u8; k];
                    let mut got = 0;
                    while got < k {
                        match self.file.read_at(&mut buf[got..], at + got as u64)? {
                            0 => break,
                            r => got += r,
                        }
                    }
                    out.extend_from_slice(&buf);
                }
            }
            at += k as u64;
        }
        Ok(out)
    }

    pub fn truncate(&mut self, size: u64) {
        self.pages.retain(|n, _| n * PAGE < size);
        if let Some(p) = self.pages.get_mut(&(size / PAGE))
            && !size.is_multiple_of(PAGE)
        {
            p[(size % PAGE) as usize..].fill(0);
        }
        self.size = size;
    }

    /// Writes `pages` (each whole, or its first `keep` bytes) and the size
    /// to the underlying file.
    pub fn persist(&self, pages: impl Iterator<Item = (u64, usize)>, size: u64) -> io::Result<()> {
        self.file.set_len(size)?;
        for (n, keep) in pages {
            let start = n * PAGE;
            if start >= size {
                continue;
            }
            let len = keep.min((size - start) as usize);
            self.file.write_all_at(&self.pages[&n][..len], start)?;
        }
        Ok(())
    }

    /// Makes everything durable: the `fsync` that covers it.
    pub fn sync(&mut self) -> io::Result<()> {
        let pages: Vec<(u64, usize)> = self.pages.keys().map(|n| (*n, PAGE as usize)).collect();
        self.persist(pages.into_iter(), self.size)?;
        self.file.sync_all()?;
        self.pages.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use super::*;

    #[test]
    fn unsynced_pages_are_read_back_and_synced_ones_persist() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![b'a'; 5000]).unwrap();
        let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
        let mut d = Dirty::open(f).unwrap();
        d.write(4090, b"0123456789").unwrap();
        assert_eq!(d.read(4088, 14).unwrap(), b"aa0123456789aa");
        assert_eq!(std::fs::read(&p).unwrap(), vec![b'a'; 5000], "not yet");
        d.write(6000, b"z").unwrap();
        assert_eq!(d.size, 6001);
        assert_eq!(d.read(5998, 10).unwrap(), b"\0\0z");
        d.truncate(4095);
        assert_eq!(d.read(4090, 10).unwrap(), b"01234");
        d.sync().unwrap();
        let on_disk = std::fs::read(&p).unwrap();
        assert_eq!(on_disk.len(), 4095);
        assert_eq!(&on_disk[4088..], b"aa01234");
    }
}
