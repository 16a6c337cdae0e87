//! `lossyfs`: a filesystem that can lose power, for tests (issue 22; Jepsen's lazyfs is the
//! model). A FUSE passthrough over a backing directory that keeps each file's written-but-not-
//! fsynced bytes apart ([`overlay`]) and, on a power cut, drops them — all, a random prefix, or a
//! prefix with a torn last page — so a broker restarted on the backing directory sees exactly
//! what an fsync put on the disk. It can also fail fsyncs with EIO and flip, zero or cut the
//! synced bytes of a file.
//!
//! Semantics: file contents (writes, truncations, and mmap writes, which the kernel sends as
//! writes) wait for the file's fsync; names (create, mkdir, link, rename, unlink, rmdir) wait
//! for their directory's fsync — both directories' for a rename ([`names`]: POSIX's rule,
//! stricter than ext4's default, which commits a new file's name with the file's own fsync).
//! A power cut drops or tears the unsynced contents and undoes the unsynced names. A process
//! killed without a power cut loses nothing, as on Linux. Kinder than a real disk: a killed
//! `lossyfs` (no `cut`) leaves every name as it was last set.
//!
//! The binary (`lossyfs`, `tests/src/bin/lossyfs.rs`) mounts it and takes commands on a Unix
//! socket, one line each, answered by one line starting `ok` or `error`:
//!
//! | command | effect |
//! |---|---|
//! | `status` | `ok pending_bytes=N pending_files=N pending_names=N fsyncs=N failed_fsyncs=N` |
//! | `cut all\|prefix\|torn SEED` | power cut: `ok lost=N kept=N files=N names_undone=N undid=create:PATH,rename:FROM->TO,remove:PATH,…`; the mount then goes away |
//! | `fail-fsync PATTERN COUNT` | the next COUNT fsyncs of files whose path contains PATTERN fail with EIO; their data stays visible but never reaches the disk |
//! | `flip PATH OFFSET BIT` | flip one bit of the synced bytes of PATH (relative to the mount) |
//! | `zero PATH OFFSET LEN` | zero synced bytes |
//! | `truncate PATH LEN` | cut the synced file to LEN bytes |
//!
//! [`Mount`] runs the binary from a test and skips (with a message on stderr) where FUSE is
//! missing.

pub mod fs;
pub mod names;
pub mod overlay;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Apply a corruption command to the synced bytes of `path` (the backing file).
pub fn corrupt(path: &Path, cmd: &str, a: u64, b: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
    match cmd {
        "flip" => {
            let mut byte = [0u8; 1];
            f.read_exact_at(&mut byte, a)?;
            byte[0] ^= 1 << (b % 8);
            f.write_all_at(&byte, a)
        }
        "zero" => f.write_all_at(&vec![0u8; b as usize], a),
        "truncate" => f.set_len(a),
        _ => Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("unknown corruption {cmd}"))),
    }
}

/// Why FUSE cannot be used on this machine, if it cannot.
pub fn unavailable() -> Option<String> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(|| {
        if !Path::new("/dev/fuse").exists() {
            return Some("/dev/fuse is missing".into());
        }
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists() || d.join("fusermount").exists()))
            .unwrap_or(false);
        if !found {
            return Some("fusermount3 is not installed (Debian package fuse3)".into());
        }
        // a trial mount tells the rest (a container without CAP_SYS_ADMIN, say)
        let tmp = match tempfile::tempdir() {
            Ok(t) => t,
            Err(e) => return Some(format!("tempdir: {e}")),
        };
        match Mount::start_unchecked(&tmp.path().join("disk"), &tmp.path().join("mnt")) {
            Ok(m) => {
                drop(m);
                None
            }
            Err(e) => Some(e),
        }
    })
    .clone()
}

/// Say loudly that a test is skipped because FUSE is missing; returns true if so.
pub fn skip_without_fuse(test: &str) -> bool {
    match unavailable() {
        Some(why) => {
            crate::report_skip(test, &format!("FUSE is unavailable here: {why}"));
            true
        }
        None => false,
    }
}

/// Whether `dir` is a mount point (its device differs from its parent's), or a dead FUSE mount
/// (stat fails: "transport endpoint is not connected").
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let parent = dir.parent().and_then(|p| std::fs::metadata(p).ok()).map(|m| m.dev());
    match std::fs::metadata(dir) {
        Ok(m) => Some(m.dev()) != parent,
        Err(e) => e.raw_os_error() == Some(libc::ENOTCONN),
    }
}

fn unmount(dir: &Path) {
    let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(dir).stderr(Stdio::null()).status();
}

/// A running `lossyfs` mount.
pub struct Mount {
    pub disk: PathBuf,
    pub mnt: PathBuf,
    socket: PathBuf,
    child: Option<Child>,
}

fn lossyfs_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var("TEST_LOSSYFS_BIN") {
        Ok(p) => PathBuf::from(p),
        Err(_) => crate::build_test_bin("lossyfs"),
    })
    .clone()
}

impl Mount {
    /// Mount `disk` (created if missing) at `mnt` (created if missing).
    pub fn start(disk: &Path, mnt: &Path) -> Mount {
        match Self::start_unchecked(disk, mnt) {
            Ok(m) => m,
            Err(e) => panic!("lossyfs: {e}"),
        }
    }

    fn start_unchecked(disk: &Path, mnt: &Path) -> Result<Mount, String> {
        if is_mount_point(mnt) {
            unmount(mnt);
        }
        std::fs::create_dir_all(disk).map_err(|e| format!("{}: {e}", disk.display()))?;
        std::fs::create_dir_all(mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
        let socket = mnt.with_extension("sock");
        let _ = std::fs::remove_file(&socket);
        let mut child = Command::new(lossyfs_bin())
            .arg("--disk")
            .arg(disk)
            .arg("--mount")
            .arg(mnt)
            .arg("--control")
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn lossyfs: {e}"))?;
        // the first line of stdout says the mount is up
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        if !line.starts_with("mounted") {
            let _ = child.kill();
            let out = child.wait_with_output().map(|o| String::from_utf8_lossy(&o.stderr).into_owned());
            return Err(format!("lossyfs did not mount: {}", out.unwrap_or_default().trim()));
        }
        Ok(Mount { disk: disk.to_path_buf(), mnt: mnt.to_path_buf(), socket, child: Some(child) })
    }

    /// Send one control command; the answer after `ok`.
    pub fn command(&self, cmd: &str) -> Result<String, String> {
        let mut s = UnixStream::connect(&self.socket).map_err(|e| format!("control socket: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        writeln!(s, "{cmd}").map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).map_err(|e| e.to_string())?;
        match line.trim().strip_prefix("ok") {
            Some(rest) => Ok(rest.trim().to_string()),
            None => Err(line.trim().to_string()),
        }
    }

    /// Power cut (kill the programs writing here first): returns the `lost=… kept=… files=…`
    /// answer; the mount is gone afterwards.
    pub fn cut(&mut self, mode: &str, seed: u64) -> String {
        let answer = self.command(&format!("cut {mode} {seed}")).unwrap_or_else(|e| panic!("lossyfs cut: {e}"));
        self.wait_exit();
        answer
    }

    fn wait_exit(&mut self) {
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // fusermount3's auto-unmount helper takes the mount away a moment after the process
        // ends, but not always (after a cut it can stay, not connected, for seconds): wait a
        // moment for it, then unmount lazily
        let deadline = Instant::now() + Duration::from_millis(300);
        while is_mount_point(&self.mnt) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if is_mount_point(&self.mnt) {
            unmount(&self.mnt);
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.command("unmount");
            self.wait_exit();
        }
    }
}
