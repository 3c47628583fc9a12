//! A swap file for the length of an experiment, so that the kernel can reclaim anonymous
//! memory too. A guardian is forked before the file exists, so neither an active swap area
//! nor the file outlives skillprof.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};

use crate::producers::system::guardian::{Guardian, Restore};
use procfs::page_size;

pub struct Swapfile {
    path: PathBuf,
    guardian: Guardian,
}

/// The swap header of `mkswap`: version 1, the last usable page, no bad pages, and the
/// `SWAPSPACE2` signature at the end of the first page.
fn header(bytes: u64, page: u64) -> Vec<u8> {
    let mut first = vec![0u8; page as usize];
    let last_page = (bytes / page - 1) as u32;
    first[1024..1028].copy_from_slice(&1u32.to_ne_bytes());
    first[1028..1032].copy_from_slice(&last_page.to_ne_bytes());
    let signature = b"SWAPSPACE2";
    first[page as usize - signature.len()..].copy_from_slice(signature);
    first
}

impl Swapfile {
    /// Creates a swap file of `bytes` at `path` and enables it.
    pub fn enable(path: &Path, bytes: u64) -> Result<Swapfile> {
        let page = page_size();
        ensure!(
            bytes >= 16 * page,
            "--swapfile must be at least {} KiB",
            16 * page / 1024
        );
        let guardian = Guardian::protect(
            Restore::swapfile(path)?,
            &format!("the swap file {} (swapoff, deleted)", path.display()),
        )?;
        write_zeros(
            path,
            bytes / page * page,
            &header(bytes, page),
            "the swap file",
        )?;
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
        // SAFETY: a NUL-terminated path; flags 0 (default priority).
        if unsafe { libc::swapon(c_path.as_ptr(), 0) } != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| {
                format!(
                    "swapon {}: the file system may not hold swap files (tmpfs, overlayfs and \
                     btrfs without nocow cannot); give --out a folder on ext4 or xfs",
                    path.display()
                )
            });
        }
        Ok(Swapfile {
            path: path.to_path_buf(),
            guardian,
        })
    }

    pub fn guardian_pid(&self) -> u32 {
        self.guardian
            .pid()
            .expect("a guardian is waited for only when restoring")
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Turns the swap off, deletes the file, and checks both.
    pub fn disable(self) -> Result<()> {
        let Swapfile { path, guardian } = self;
        guardian.restore()?;
        ensure!(
            !is_active(&path)?,
            "{} is still an active swap area: run `swapoff {0}`",
            path.display()
        );
        ensure!(
            !path.exists(),
            "the swap file {} is still there: delete it",
            path.display()
        );
        Ok(())
    }
}

/// A file without holes (swapon refuses sparse files; a page-cache load needs every page
/// written), `first_page` then zeros, in 1 MiB blocks, synced; `what` names it in errors.
pub fn write_zeros(path: &Path, bytes: u64, first_page: &[u8], what: &str) -> Result<()> {
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {what} {}", path.display()))?;
    let block = vec![0u8; 1 << 20];
    file.write_all(first_page)?;
    let mut left = bytes - first_page.len() as u64;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        file.write_all(&block[..n])
            .with_context(|| format!("writing {what} {}", path.display()))?;
        left -= n as u64;
    }
    file.sync_all()
        .with_context(|| format!("syncing {what} {}", path.display()))
}

/// Whether /proc/swaps lists `path`.
pub fn is_active(path: &Path) -> Result<bool> {
    let swaps = fs::read_to_string("/proc/swaps").context("reading /proc/swaps")?;
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    Ok(swaps
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .any(|name| Path::new(name) == canonical || Path::new(name) == path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_mkswaps() {
        let header = header(1 << 20, 4096);
        assert_eq!(header.len(), 4096);
        assert_eq!(&header[1024..1028], &1u32.to_ne_bytes());
        assert_eq!(&header[1028..1032], &255u32.to_ne_bytes());
        assert_eq!(&header[4086..], b"SWAPSPACE2");
    }
}
