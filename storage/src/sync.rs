//! Locks whose poisoning is fatal. A lock is poisoned when a thread panicked while holding it:
//! the state behind it may be half-changed (a producer entry updated without its batch, an
//! index without its log, a flusher's written end without its file). Going on with it could
//! serve or store wrong data — or call unsynced data durable — so the process stops instead
//! (`abort`, no unwinding) and a restart rebuilds every in-memory state from the logs on disk,
//! which is what crash recovery is for. Used by the storage crate and the broker.

use std::sync::LockResult;

/// `lock()`, `read()` and `write()` results: the guard, or the end of the process.
pub trait OrDie<G> {
    fn or_die(self) -> G;
}

impl<G> OrDie<G> for LockResult<G> {
    fn or_die(self) -> G {
        match self {
            Ok(guard) => guard,
            Err(_) => {
                let why = "a thread panicked while holding a lock; its state may be half-changed: \
                           stopping (a restart recovers from the logs)";
                tracing::error!("{why}");
                eprintln!("sluice: {why}");
                std::process::abort()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex, RwLock};

    #[test]
    fn an_unpoisoned_lock_gives_its_guard() {
        let m = Mutex::new(1);
        *m.lock().or_die() += 1;
        assert_eq!(*m.lock().or_die(), 2);
        let r = RwLock::new(3);
        *r.write().or_die() += 1;
        assert_eq!(*r.read().or_die(), 4);
    }

    /// Run in a child process (the parent checks it died of SIGABRT): poison a lock, take it.
    #[test]
    fn a_poisoned_lock_stops_the_process() {
        if std::env::var_os("SLUICE_POISON_CHILD").is_some() {
            let m = Arc::new(Mutex::new(0));
            let held = m.clone();
            let _ = std::thread::spawn(move || {
                let _guard = held.lock().or_die();
                panic!("poisoning the lock");
            })
            .join();
            drop(m.lock().or_die());
            std::process::exit(0); // not reached when or_die stops the process
        }
        let exe = std::env::current_exe().expect("test binary");
        let out = std::process::Command::new(exe)
            .args(["--exact", "sync::tests::a_poisoned_lock_stops_the_process", "--nocapture", "--test-threads=1"])
            .env("SLUICE_POISON_CHILD", "1")
            .output()
            .expect("child test process");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "SIGABRT expected: {:?}", out.status);
        assert!(String::from_utf8_lossy(&out.stderr).contains("stopping (a restart recovers from the logs)"));
    }
}
