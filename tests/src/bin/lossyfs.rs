//! `lossyfs --disk DIR --mount DIR --control SOCKET`: mount a filesystem that can lose power
//! (`sluice_tests::lossyfs`, where its commands are listed) at `--mount`, over the backing
//! directory `--disk`; prints `mounted` on stdout once the mount is up, then serves control
//! commands on the Unix socket until a `cut` or `unmount` command (or SIGTERM/kill: a plain exit
//! loses the unsynced bytes, as a power cut with mode `all`).

use sluice_tests::lossyfs::fs::{CutMode, LossyFs, Shared};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

fn arg(name: &str) -> Option<PathBuf> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(PathBuf::from)
}

fn fail(msg: String) -> ! {
    eprintln!("lossyfs: {msg}");
    std::process::exit(1)
}

/// One control command; `Err` ends the program after answering (cut, unmount).
fn command(shared: &Shared, disk: &std::path::Path, line: &str) -> (String, bool) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
    match words.as_slice() {
        ["status"] => {
            let st = shared.lock();
            let (bytes, files) = st.pending();
            (
                format!(
                    "ok pending_bytes={bytes} pending_files={files} pending_names={} fsyncs={} failed_fsyncs={}",
                    st.names.pending(),
                    st.fsyncs,
                    st.failed_fsyncs
                ),
                false,
            )
        }
        ["cut", mode, _seed] => match (CutMode::parse(mode), num(2)) {
            (Some(mode), Some(seed)) => {
                let mut st = shared.lock();
                let (lost, kept, files) = st.cut(mode, seed);
                let undone = &st.names_undone;
                (
                    format!(
                        "ok lost={lost} kept={kept} files={files} names_undone={} undid={}",
                        undone.len(),
                        undone.join(",")
                    ),
                    true,
                )
            }
            _ => ("error usage: cut all|prefix|torn SEED".into(), false),
        },
        ["unmount"] => ("ok".into(), true),
        ["fail-fsync", pattern, _count] => match num(2) {
            Some(count) => {
                shared.lock().set_fail_fsync(pattern.to_string(), count);
                ("ok".into(), false)
            }
            None => ("error usage: fail-fsync PATTERN COUNT".into(), false),
        },
        [cmd @ ("flip" | "zero"), path, _, _] | [cmd @ "truncate", path, _] => {
            let (a, b) = (num(2), num(3).unwrap_or(0));
            let target = disk.join(path.trim_start_matches('/'));
            match a.map(|a| sluice_tests::lossyfs::corrupt(&target, cmd, a, b)) {
                Some(Ok(())) => ("ok".into(), false),
                Some(Err(e)) => (format!("error {}: {e}", target.display()), false),
                None => ("error usage: flip PATH OFFSET BIT | zero PATH OFFSET LEN | truncate PATH LEN".into(), false),
            }
        }
        _ => (format!("error unknown command {line:?}"), false),
    }
}

fn main() {
    let (Some(disk), Some(mnt), Some(control)) = (arg("--disk"), arg("--mount"), arg("--control")) else {
        eprintln!("usage: lossyfs --disk DIR --mount DIR --control SOCKET");
        std::process::exit(2);
    };
    let _ = std::fs::create_dir_all(&disk);
    let _ = std::fs::create_dir_all(&mnt);
    let disk = std::fs::canonicalize(&disk).unwrap_or_else(|e| fail(format!("{}: {e}", disk.display())));
    let shared = Shared::new(disk.clone());
    let _ = std::fs::remove_file(&control);
    let listener = UnixListener::bind(&control).unwrap_or_else(|e| fail(format!("{}: {e}", control.display())));
    let options = [
        fuser::MountOption::FSName("lossyfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::AutoUnmount,
        fuser::MountOption::AllowOther,
    ];
    let session = fuser::spawn_mount2(LossyFs(shared.clone()), &mnt, &options)
        .unwrap_or_else(|e| fail(format!("mount at {}: {e}", mnt.display())));
    println!("mounted {}", mnt.display());
    let _ = std::io::stdout().flush();
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let mut line = String::new();
        let Ok(mut w) = conn.try_clone() else { continue };
        if BufReader::new(conn).read_line(&mut line).is_err() {
            continue;
        }
        let (answer, end) = command(&shared, &disk, line.trim());
        let _ = writeln!(w, "{answer}");
        if end {
            if line.trim() == "unmount" {
                // a clean shutdown: everything written reaches the disk
                let inos = shared.lock().pending_inos();
                for ino in inos {
                    let _ = shared.lock().sync(ino);
                }
            }
            break;
        }
    }
    drop(session);
    let _ = std::fs::remove_file(&control);
}
