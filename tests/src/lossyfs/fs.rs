//! The FUSE passthrough: every name, directory and metadata change goes straight to the backing
//! directory (the "disk") — names are journaled until their directory is fsynced ([`Names`]);
//! file contents written since a file's last fsync stay in its [`Overlay`] until an fsync
//! applies them, and a power cut decides what of them survives and undoes the names no
//! directory fsync covered.

use super::names::Names;
use super::overlay::{Op, Overlay, PAGE};
use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Attributes are never cached by the kernel: the backing directory can change under the mount
/// (the corruption commands), and a stale size would hide it.
const TTL: Duration = Duration::ZERO;

/// How a power cut treats each file's unsynced bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// All of them are lost.
    All,
    /// A random prefix (in write order) reached the disk.
    Prefix,
    /// A random prefix reached the disk, and the last page it touched is torn (its end zeros).
    Torn,
}

impl CutMode {
    pub fn parse(s: &str) -> Option<CutMode> {
        match s {
            "all" => Some(CutMode::All),
            "prefix" => Some(CutMode::Prefix),
            "torn" => Some(CutMode::Torn),
            _ => None,
        }
    }
}

struct Node {
    /// Paths relative to the backing root ("" is the root); several after hard links, none
    /// once unlinked.
    paths: Vec<PathBuf>,
    file: Option<File>,
    opens: u32,
    overlay: Overlay,
}

/// Shared between the FUSE session thread and the control socket.
#[derive(Default)]
pub struct State {
    root: PathBuf,
    nodes: HashMap<u64, Node>,
    /// After a power cut nothing more reaches the disk.
    dead: bool,
    /// `fail-fsync`: fsyncs of files whose path contains the pattern fail with EIO, this many times.
    fail_fsync: Option<(String, u64)>,
    pub fsyncs: u64,
    pub failed_fsyncs: u64,
    /// Name changes not yet durable.
    pub names: Names,
    /// What the power cut undid (`create:PATH`, `rename:FROM->TO`, `remove:PATH`).
    pub names_undone: Vec<String>,
}

#[derive(Clone)]
pub struct Shared(pub Arc<Mutex<State>>);

impl Shared {
    pub fn new(root: PathBuf) -> Shared {
        let mut nodes = HashMap::new();
        nodes.insert(
            fuser::FUSE_ROOT_ID,
            Node { paths: vec![PathBuf::new()], file: None, opens: 0, overlay: Overlay::default() },
        );
        let names = Names::new(&root);
        Shared(Arc::new(Mutex::new(State { root, nodes, names, ..State::default() })))
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn system_time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH
    }
}

impl State {
    fn path_of(&self, ino: u64) -> Option<PathBuf> {
        self.nodes.get(&ino).and_then(|n| n.paths.first()).map(|p| self.root.join(p))
    }

    fn rel_of(&self, ino: u64) -> Option<PathBuf> {
        self.nodes.get(&ino).and_then(|n| n.paths.first()).cloned()
    }

    /// The FUSE inode of a backing file: its own inode number + 1 (1 is the root's).
    fn ino_for(meta: &std::fs::Metadata) -> u64 {
        meta.ino() + 1
    }

    fn attr(&self, ino: u64, meta: &std::fs::Metadata) -> FileAttr {
        let kind = if meta.is_dir() {
            FileType::Directory
        } else if meta.file_type().is_symlink() {
            FileType::Symlink
        } else {
            FileType::RegularFile
        };
        let size = match self.nodes.get(&ino) {
            Some(n) if kind == FileType::RegularFile => n.overlay.size(meta.len()),
            _ => meta.len(),
        };
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: system_time(meta.atime(), meta.atime_nsec()),
            mtime: system_time(meta.mtime(), meta.mtime_nsec()),
            ctime: system_time(meta.ctime(), meta.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind,
            perm: (meta.permissions().mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev() as u32,
            blksize: PAGE as u32,
            flags: 0,
        }
    }

    /// Look up `name` in directory `parent`, registering the node (or the new path of a hard
    /// link) the first time it is seen.
    fn lookup_child(&mut self, parent: u64, name: &OsStr) -> Result<(u64, FileAttr), i32> {
        let rel = self.rel_of(parent).ok_or(libc::ENOENT)?.join(name);
        let meta = std::fs::symlink_metadata(self.root.join(&rel)).map_err(|e| errno(&e))?;
        let ino = Self::ino_for(&meta);
        let node = self.nodes.entry(ino).or_insert_with(|| Node {
            paths: Vec::new(),
            file: None,
            opens: 0,
            overlay: Overlay::default(),
        });
        if !node.paths.contains(&rel) {
            node.paths.push(rel);
        }
        Ok((ino, self.attr(ino, &meta)))
    }

    fn getattr(&self, ino: u64) -> Result<FileAttr, i32> {
        let node = self.nodes.get(&ino).ok_or(libc::ENOENT)?;
        let meta = match (&node.file, node.paths.first()) {
            (Some(f), _) => f.metadata(),
            (None, Some(p)) => std::fs::symlink_metadata(self.root.join(p)),
            (None, None) => return Err(libc::ENOENT),
        }
        .map_err(|e| errno(&e))?;
        Ok(self.attr(ino, &meta))
    }

    fn file(&mut self, ino: u64) -> Result<&File, i32> {
        let root = self.root.clone();
        let node = self.nodes.get_mut(&ino).ok_or(libc::ENOENT)?;
        if node.file.is_none() {
            let p = root.join(node.paths.first().ok_or(libc::ENOENT)?);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&p)
                .or_else(|_| File::open(&p))
                .map_err(|e| errno(&e))?;
            node.file = Some(f);
        }
        node.file.as_ref().ok_or(libc::EIO)
    }

    fn read(&mut self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, i32> {
        let f = self.file(ino)?;
        let disk_size = f.metadata().map_err(|e| errno(&e))?.len();
        let mut buf = vec![0u8; size as usize];
        let mut done = 0usize;
        while done < buf.len() && offset + (done as u64) < disk_size {
            match f.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(errno(&e)),
            }
        }
        let node = self.nodes.get(&ino).ok_or(libc::ENOENT)?;
        node.overlay.read(disk_size, offset, &mut buf);
        Ok(buf)
    }

    fn apply(f: &File, ops: &[Op]) -> std::io::Result<()> {
        for op in ops {
            match op {
                Op::Write { offset, data } => f.write_all_at(data, *offset)?,
                Op::Truncate { len } => f.set_len(*len)?,
            }
        }
        Ok(())
    }

    fn fsync(&mut self, ino: u64) -> Result<(), i32> {
        self.fsyncs += 1;
        if self.dead {
            return Ok(());
        }
        let path = self.rel_of(ino).unwrap_or_default();
        if let Some((pattern, left)) = &mut self.fail_fsync {
            if *left > 0 && path.to_string_lossy().contains(pattern.as_str()) {
                *left -= 1;
                self.failed_fsyncs += 1;
                if let Some(n) = self.nodes.get_mut(&ino) {
                    n.overlay.fail_sync();
                }
                return Err(libc::EIO);
            }
        }
        let ops = match self.nodes.get_mut(&ino) {
            Some(n) if !n.overlay.pending.is_empty() => n.overlay.take_for_sync(),
            _ => return Ok(()),
        };
        let f = self.file(ino)?;
        Self::apply(f, &ops).map_err(|e| errno(&e))
    }

    /// Rewrite every node's paths under `from` to be under `to` (a rename), and forget `to`'s
    /// old occupant.
    fn renamed(&mut self, from: &Path, to: &Path) {
        for node in self.nodes.values_mut() {
            node.paths.retain(|p| p != to);
            for p in node.paths.iter_mut() {
                if let Ok(rest) = p.strip_prefix(from) {
                    *p = if rest.as_os_str().is_empty() { to.to_path_buf() } else { to.join(rest) };
                }
            }
        }
        self.drop_orphans();
    }

    fn unlinked(&mut self, rel: &Path) {
        for node in self.nodes.values_mut() {
            node.paths.retain(|p| p != rel);
        }
        self.drop_orphans();
    }

    /// A node with no name and no open file is gone, with its unsynced bytes.
    fn drop_orphans(&mut self) {
        self.nodes.retain(|ino, n| *ino == fuser::FUSE_ROOT_ID || !n.paths.is_empty() || n.opens > 0);
    }

    /// Unsynced bytes and the files holding them.
    pub fn pending(&self) -> (u64, usize) {
        let files = self.nodes.values().filter(|n| !n.overlay.pending.is_empty()).count();
        (self.nodes.values().map(|n| n.overlay.pending_bytes()).sum(), files)
    }

    /// Power cut: decide per file what of its unsynced bytes reached the disk, write that, and
    /// from now on write nothing. Returns (bytes lost, bytes kept, files touched).
    pub fn cut(&mut self, mode: CutMode, seed: u64) -> (u64, u64, usize) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut lost, mut kept, mut files) = (0, 0, 0);
        let mut inos: Vec<u64> = self.nodes.keys().copied().collect();
        inos.sort_unstable(); // the seed decides, not the hash map's order
        for ino in inos {
            let Some(node) = self.nodes.get(&ino) else { continue };
            let total = node.overlay.pending_bytes();
            if node.overlay.pending.is_empty() {
                continue;
            }
            files += 1;
            let (keep, tear) = match mode {
                CutMode::All => (0, None),
                CutMode::Prefix => (rng.gen_range(0..=total), None),
                CutMode::Torn => (rng.gen_range(0..=total), Some(rng.gen_range(0..PAGE))),
            };
            let survivors = node.overlay.survivors(keep, tear);
            let applied: u64 =
                survivors.iter().map(|op| if let Op::Write { data, .. } = op { data.len() as u64 } else { 0 }).sum();
            kept += applied;
            lost += total - applied;
            if !survivors.is_empty() && !node.paths.is_empty() {
                if let Ok(f) = self.file(ino) {
                    let _ = Self::apply(f, &survivors);
                }
            }
        }
        for node in self.nodes.values_mut() {
            node.overlay = Overlay::default();
        }
        self.names_undone = self.names.cut();
        self.dead = true;
        (lost, kept, files)
    }

    /// Files holding unsynced bytes.
    pub fn pending_inos(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(_, n)| !n.overlay.pending.is_empty()).map(|(i, _)| *i).collect()
    }

    /// fsync one file (a clean unmount syncs them all).
    pub fn sync(&mut self, ino: u64) -> Result<(), i32> {
        self.fsync(ino)
    }

    /// `fail-fsync PATTERN COUNT`.
    pub fn set_fail_fsync(&mut self, pattern: String, count: u64) {
        self.fail_fsync = Some((pattern, count));
    }
}

pub struct LossyFs(pub Shared);

impl Filesystem for LossyFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match self.0.lock().lookup_child(parent, name) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.0.lock().getattr(ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut st = self.0.lock();
        if let (Some(mode), Some(p)) = (mode, st.path_of(ino)) {
            if let Err(e) = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & 0o7777)) {
                return reply.error(errno(&e));
            }
        }
        if let Some(len) = size {
            // a truncation is a change to the contents: unsynced until an fsync
            let dead = st.dead;
            match st.nodes.get_mut(&ino) {
                Some(n) if !dead => n.overlay.truncate(len),
                Some(_) => {}
                None => return reply.error(libc::ENOENT),
            }
        }
        match st.getattr(ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let mut st = self.0.lock();
        if st.dead {
            return reply.error(libc::EIO);
        }
        let Some(rel) = st.rel_of(parent).map(|p| p.join(name)) else { return reply.error(libc::ENOENT) };
        let p = st.root.join(&rel);
        if let Err(e) = std::fs::create_dir(&p) {
            return reply.error(errno(&e));
        }
        st.names.created(&rel, true);
        let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & !umask & 0o7777));
        match st.lookup_child(parent, name) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.0.lock();
        if st.dead {
            return reply.error(libc::EIO);
        }
        let Some(rel) = st.rel_of(parent).map(|p| p.join(name)) else { return reply.error(libc::ENOENT) };
        let kept = st.names.before_remove(&rel);
        match std::fs::remove_file(st.root.join(&rel)) {
            Ok(()) => {
                st.names.removed(&rel, kept);
                st.unlinked(&rel);
                reply.ok()
            }
            Err(e) => {
                if let Some(k) = kept {
                    let _ = std::fs::remove_file(k);
                }
                reply.error(errno(&e))
            }
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.0.lock();
        if st.dead {
            return reply.error(libc::EIO);
        }
        let Some(rel) = st.rel_of(parent).map(|p| p.join(name)) else { return reply.error(libc::ENOENT) };
        match std::fs::remove_dir(st.root.join(&rel)) {
            Ok(()) => {
                st.names.removed(&rel, None);
                st.unlinked(&rel);
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        _flags: u32,
        reply: ReplyEmpty,
    ) {
        let mut st = self.0.lock();
        if st.dead {
            return reply.error(libc::EIO);
        }
        let (Some(from), Some(to)) =
            (st.rel_of(parent).map(|p| p.join(name)), st.rel_of(newparent).map(|p| p.join(newname)))
        else {
            return reply.error(libc::ENOENT);
        };
        let replaced = st.names.before_rename(&to);
        match std::fs::rename(st.root.join(&from), st.root.join(&to)) {
            Ok(()) => {
                st.names.renamed(&from, &to, replaced);
                st.renamed(&from, &to);
                reply.ok()
            }
            Err(e) => {
                if let Some(k) = replaced {
                    let _ = std::fs::remove_file(k);
                }
                reply.error(errno(&e))
            }
        }
    }

    fn link(&mut self, _req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        let mut st = self.0.lock();
        if st.dead {
            return reply.error(libc::EIO);
        }
        let (Some(from), Some(rel)) = (st.path_of(ino), st.rel_of(newparent).map(|p| p.join(newname))) else {
            return reply.error(libc::ENOENT);
        };
        if let Err(e) = std::fs::hard_link(&from, st.root.join(&rel)) {
            return reply.error(errno(&e));
        }
        st.names.created(&rel, false);
        match st.lookup_child(newparent, newname) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(e),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let mut st = self.0.lock();
        match st.file(ino) {
            Ok(_) => {
                if let Some(n) = st.nodes.get_mut(&ino) {
                    n.opens += 1;
                }
                reply.opened(0, 0)
            }
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.0.lock();
        if st.dead {
            return reply.error(libc::EIO);
        }
        let Some(rel) = st.rel_of(parent).map(|p| p.join(name)) else { return reply.error(libc::ENOENT) };
        let p = st.root.join(&rel);
        let existed = std::fs::symlink_metadata(&p).is_ok();
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(true);
        if flags & libc::O_EXCL != 0 {
            o.create_new(true);
        }
        if flags & libc::O_TRUNC != 0 {
            o.truncate(true);
        }
        let f = match o.open(&p) {
            Ok(f) => f,
            Err(e) => return reply.error(errno(&e)),
        };
        let _ = f.set_permissions(std::fs::Permissions::from_mode(mode & !umask & 0o7777));
        if !existed {
            st.names.created(&rel, false);
        }
        match st.lookup_child(parent, name) {
            Ok((ino, attr)) => {
                if let Some(n) = st.nodes.get_mut(&ino) {
                    n.opens += 1;
                    n.file.get_or_insert(f);
                }
                reply.created(&TTL, &attr, 0, 0, 0)
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        match self.0.lock().read(ino, offset.max(0) as u64, size) {
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut st = self.0.lock();
        let dead = st.dead;
        match st.nodes.get_mut(&ino) {
            Some(n) => {
                if !dead {
                    n.overlay.write(offset.max(0) as u64, data);
                }
                reply.written(data.len() as u32)
            }
            None => reply.error(libc::ENOENT),
        }
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.0.lock();
        if let Some(n) = st.nodes.get_mut(&ino) {
            n.opens = n.opens.saturating_sub(1);
        }
        st.drop_orphans();
        reply.ok()
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        match self.0.lock().fsync(ino) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        reply.ok()
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let st = self.0.lock();
        let Some(dir) = st.path_of(ino) else { return reply.error(libc::ENOENT) };
        let entries = match std::fs::read_dir(&dir) {
            Ok(rd) => rd.flatten().collect::<Vec<_>>(),
            Err(e) => return reply.error(errno(&e)),
        };
        let mut all: Vec<(u64, FileType, std::ffi::OsString)> =
            vec![(ino, FileType::Directory, ".".into()), (ino, FileType::Directory, "..".into())];
        for e in entries {
            let Ok(meta) = e.metadata() else { continue };
            let kind = if meta.is_dir() { FileType::Directory } else { FileType::RegularFile };
            all.push((State::ino_for(&meta), kind, e.file_name()));
        }
        for (i, (ino, kind, name)) in all.into_iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(ino, (i + 1) as i64, kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        let mut st = self.0.lock();
        st.fsyncs += 1;
        if st.dead {
            return reply.ok();
        }
        match st.rel_of(ino) {
            Some(rel) => {
                st.names.dir_synced(&rel);
                reply.ok()
            }
            None => reply.error(libc::ENOENT),
        }
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let root = self.0.lock().root.clone();
        let Ok(c) = std::ffi::CString::new(root.as_os_str().as_encoded_bytes()) else {
            return reply.error(libc::EINVAL);
        };
        let mut s: libc::statvfs = unsafe_zeroed_statvfs();
        // SAFETY: `c` is a valid NUL-terminated path and `s` a valid out-pointer.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
        if rc != 0 {
            return reply.error(libc::EIO);
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        )
    }
}

fn unsafe_zeroed_statvfs() -> libc::statvfs {
    // SAFETY: statvfs is a plain C struct of integers, for which all-zero bytes are valid.
    #[allow(unsafe_code)]
    unsafe {
        std::mem::zeroed()
    }
}
