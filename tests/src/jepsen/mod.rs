//! Jepsen-style fault testing for Sluice (issue 9): a recorded history of client operations
//! ([`history`]) and an independent checker ([`checker`]). The harness binary
//! (`src/bin/jepsen.rs`) runs workloads against broker processes while a nemesis injects
//! faults, and writes the history the checker judges.

pub mod checker;
pub mod history;
