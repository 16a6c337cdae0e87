//! Locks whose poisoning is not swallowed. A lock is poisoned when a thread panicked while
//! holding it; the state behind it (a producer's sequences and epoch, a consumer's assignment,
//! the requests awaiting answers on a connection) may be half-updated, and carrying on with it
//! could duplicate or lose records. So taking a poisoned lock panics too, with the reason,
//! instead of handing out what it guards (the broker stops the process instead:
//! `sluice_storage::sync::OrDie`).

use std::sync::{Mutex, MutexGuard};

pub(crate) trait Locked<T> {
    /// The guard; panics if a thread panicked while holding the lock.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        match self.lock() {
            Ok(g) => g,
            Err(_) => panic!(
                "a sluice client lock is poisoned (a thread panicked while holding it): the state it guards \
                 may be inconsistent, so this client stops rather than risk duplicating or losing records"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_not_handed_out() {
        let m = std::sync::Arc::new(Mutex::new(1));
        assert_eq!(*m.locked(), 1);
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poisoning the lock");
        })
        .join();
        let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| *m.locked()));
        assert!(taken.is_err(), "a poisoned lock must not be handed out");
    }
}
