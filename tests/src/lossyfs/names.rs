//! Names that are not yet durable: every create, mkdir, link, rename, unlink and rmdir reaches
//! the backing directory at once (so reads and listings see it), and is journaled here until
//! the directory it changed is fsynced — for a rename, both directories. A power cut undoes the
//! journaled changes, newest first: a created name goes (with the file or directory it named),
//! a renamed one goes back, and an unlinked file, or one a rename replaced, comes back from a
//! hard link kept beside the backing directory (`<disk>.lossyfs-stash`).
//!
//! This is POSIX's rule, and stricter than ext4 in its default mode, whose journal commits a
//! file's directory entry with the file's own fsync: a broker that is durable here fsyncs a
//! directory after each change it relies on.

use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Change {
    /// `path` was created (`dir`: a directory).
    Created { path: PathBuf, dir: bool },
    /// `from` was renamed to `to`; `replaced`: where the file `to` named before is kept.
    Renamed { from: PathBuf, to: PathBuf, replaced: Option<PathBuf> },
    /// `path` was removed; `kept`: where its file is kept (`None`: an empty directory).
    Removed { path: PathBuf, kept: Option<PathBuf> },
}

#[derive(Debug)]
struct Pending {
    change: Change,
    /// Directories (relative to the root) still to be fsynced before it is durable.
    dirs: Vec<PathBuf>,
}

/// The journal of one mount.
#[derive(Debug, Default)]
pub struct Names {
    root: PathBuf,
    stash: PathBuf,
    pending: Vec<Pending>,
    seq: u64,
}

fn parent(p: &Path) -> PathBuf {
    p.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl Names {
    pub fn new(root: &Path) -> Names {
        let mut stash = root.as_os_str().to_owned();
        stash.push(".lossyfs-stash");
        Names { root: root.to_path_buf(), stash: PathBuf::from(stash), pending: Vec::new(), seq: 0 }
    }

    /// Changes not yet durable.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Keep the file at `rel` under a hard link in the stash; where, or `None` if there is no
    /// file there (or it is a directory).
    fn keep(&mut self, rel: &Path) -> Option<PathBuf> {
        let src = self.root.join(rel);
        let meta = std::fs::symlink_metadata(&src).ok()?;
        if meta.is_dir() {
            return None;
        }
        std::fs::create_dir_all(&self.stash).ok()?;
        self.seq += 1;
        let kept = self.stash.join(self.seq.to_string());
        std::fs::hard_link(&src, &kept).ok()?;
        Some(kept)
    }

    /// `rel` was just created (call after the backing operation succeeded).
    pub fn created(&mut self, rel: &Path, dir: bool) {
        let change = Change::Created { path: rel.to_path_buf(), dir };
        self.pending.push(Pending { change, dirs: vec![parent(rel)] });
    }

    /// Call before renaming `from` to `to` on the backing directory: keeps what `to` names.
    pub fn before_rename(&mut self, to: &Path) -> Option<PathBuf> {
        self.keep(to)
    }

    /// `from` was just renamed to `to`; `replaced` is what `before_rename` answered.
    pub fn renamed(&mut self, from: &Path, to: &Path, replaced: Option<PathBuf>) {
        let mut dirs = vec![parent(from)];
        if parent(to) != parent(from) {
            dirs.push(parent(to));
        }
        let change = Change::Renamed { from: from.to_path_buf(), to: to.to_path_buf(), replaced };
        self.pending.push(Pending { change, dirs });
    }

    /// Call before removing `rel` from the backing directory: keeps its file.
    pub fn before_remove(&mut self, rel: &Path) -> Option<PathBuf> {
        self.keep(rel)
    }

    /// `rel` was just removed; `kept` is what `before_remove` answered.
    pub fn removed(&mut self, rel: &Path, kept: Option<PathBuf>) {
        let change = Change::Removed { path: rel.to_path_buf(), kept };
        self.pending.push(Pending { change, dirs: vec![parent(rel)] });
    }

    /// The directory `rel` was fsynced: the changes to it are durable.
    pub fn dir_synced(&mut self, rel: &Path) {
        for p in &mut self.pending {
            p.dirs.retain(|d| d != rel);
        }
        let (done, left): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut self.pending).into_iter().partition(|p| p.dirs.is_empty());
        self.pending = left;
        for p in done {
            match p.change {
                Change::Renamed { replaced: Some(k), .. } | Change::Removed { kept: Some(k), .. } => {
                    let _ = std::fs::remove_file(k);
                }
                _ => {}
            }
        }
    }

    /// Power cut: undo every change not yet durable, newest first (errors ignored: a change a
    /// later durable one built on may be gone already). Returns what was undone, oldest first.
    pub fn cut(&mut self) -> Vec<String> {
        let undone: Vec<String> = self
            .pending
            .iter()
            .map(|p| match &p.change {
                Change::Created { path, .. } => format!("create:{}", path.display()),
                Change::Renamed { from, to, .. } => format!("rename:{}->{}", from.display(), to.display()),
                Change::Removed { path, .. } => format!("remove:{}", path.display()),
            })
            .collect();
        let root = self.root.clone();
        let restore = |kept: &Path, to: &Path| {
            let _ = std::fs::remove_file(root.join(to));
            let _ = std::fs::rename(kept, root.join(to));
        };
        for p in std::mem::take(&mut self.pending).into_iter().rev() {
            match p.change {
                Change::Created { path, dir: true } => {
                    let _ = std::fs::remove_dir_all(root.join(path));
                }
                Change::Created { path, dir: false } => {
                    let _ = std::fs::remove_file(root.join(path));
                }
                Change::Renamed { from, to, replaced } => {
                    let _ = std::fs::rename(root.join(&to), root.join(&from));
                    if let Some(k) = replaced {
                        restore(&k, &to);
                    }
                }
                Change::Removed { path, kept: Some(k) } => restore(&k, &path),
                Change::Removed { path, kept: None } => {
                    let _ = std::fs::create_dir(root.join(path));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.stash);
        undone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn names_under(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(root.join(&d)).unwrap().flatten() {
                let rel = d.join(e.file_name());
                if e.file_type().unwrap().is_dir() {
                    stack.push(rel.clone());
                    out.push(format!("{}/", rel.display()));
                } else {
                    out.push(format!("{}={}", rel.display(), fs::read_to_string(e.path()).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    /// What a cut keeps: exactly the changes whose directories were fsynced after them.
    #[test]
    fn a_cut_undoes_exactly_the_changes_no_directory_fsync_covered() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("disk");
        fs::create_dir_all(root.join("p")).unwrap();
        fs::write(root.join("p/old"), "old").unwrap();
        fs::write(root.join("p/gone"), "gone").unwrap();
        fs::write(root.join("cp"), "cp-1").unwrap();
        let mut n = Names::new(&root);
        // durable: a created file, its directory fsynced
        fs::write(root.join("p/a"), "a").unwrap();
        n.created(Path::new("p/a"), false);
        n.dir_synced(Path::new("p"));
        // not durable: a new directory with a file, an unlink, and a replacing rename
        fs::create_dir(root.join("q")).unwrap();
        n.created(Path::new("q"), true);
        fs::write(root.join("q/b"), "b").unwrap();
        n.created(Path::new("q/b"), false);
        n.dir_synced(Path::new("q")); // q's entry in the root is still not durable
        let kept = n.before_remove(Path::new("p/gone"));
        fs::remove_file(root.join("p/gone")).unwrap();
        n.removed(Path::new("p/gone"), kept);
        fs::write(root.join("cp.tmp"), "cp-2").unwrap();
        n.created(Path::new("cp.tmp"), false);
        let replaced = n.before_rename(Path::new("cp"));
        fs::rename(root.join("cp.tmp"), root.join("cp")).unwrap();
        n.renamed(Path::new("cp.tmp"), Path::new("cp"), replaced);
        assert_eq!(n.pending(), 4);
        assert_eq!(n.cut().len(), 4);
        assert_eq!(names_under(&root), vec!["cp=cp-1", "p/", "p/a=a", "p/gone=gone", "p/old=old"]);
        assert!(!PathBuf::from(format!("{}.lossyfs-stash", root.display())).exists());
    }

    /// The same changes, each directory fsynced after them: nothing is undone.
    #[test]
    fn fsynced_directories_keep_every_change() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("disk");
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("cp"), "cp-1").unwrap();
        let mut n = Names::new(&root);
        fs::write(root.join("cp.tmp"), "cp-2").unwrap();
        n.created(Path::new("cp.tmp"), false);
        let replaced = n.before_rename(Path::new("cp"));
        fs::rename(root.join("cp.tmp"), root.join("cp")).unwrap();
        n.renamed(Path::new("cp.tmp"), Path::new("cp"), replaced);
        n.dir_synced(Path::new(""));
        assert_eq!(n.cut(), Vec::<String>::new());
        assert_eq!(names_under(&root), vec!["cp=cp-2"]);
    }
}
