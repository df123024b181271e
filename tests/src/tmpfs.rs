//! Small tmpfs volumes for data directories that run out of space, and a
//! filler that takes a volume's free space down to a chosen amount (as
//! something else on the volume would). Mounting needs root: without it,
//! `Tmpfs::mount` says why, and the test says "skipped".

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a new directory, unmounted on drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
    fillers: u32,
}

impl Tmpfs {
    /// A tmpfs of `mib` MiB.
    pub fn mount(mib: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let o = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "mount -t tmpfs: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir, fillers: 0 })
    }

    /// `n` volumes of `mib` MiB each, or `None` after saying "skipped".
    pub fn mounts(n: usize, mib: u64) -> Option<Vec<Tmpfs>> {
        match (0..n).map(|_| Tmpfs::mount(mib)).collect() {
            Ok(v) => Some(v),
            Err(why) => {
                eprintln!("skipped: a tmpfs cannot be mounted here ({why})");
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The bytes free on the volume.
    pub fn available(&self) -> u64 {
        om::tasks::health::volume_space(self.path()).unwrap().1
    }

    /// Fills the volume until `left` bytes are free (no-op if fewer are).
    pub fn fill_to(&mut self, left: u64) {
        let fill = self.available().saturating_sub(left);
        if fill == 0 {
            return;
        }
        self.fillers += 1;
        let f = self.path().join(format!("filler{}", self.fillers));
        std::fs::write(&f, vec![7u8; fill as usize]).unwrap();
    }

    /// Removes what `fill_to` wrote.
    pub fn unfill(&mut self) {
        for i in 1..=self.fillers {
            let f: PathBuf = self.path().join(format!("filler{i}"));
            let _ = std::fs::remove_file(f);
        }
        self.fillers = 0;
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
