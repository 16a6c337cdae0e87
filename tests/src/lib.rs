//! # sluice-tests
//!
//! Integration, real-client compatibility and (later) fault tests. What belongs here:
//! - this library: helpers that start *real* `sluice` broker processes on free 127.0.0.1 ports
//!   with their own data directories, and stop, kill -9, pause or restart them;
//! - `tests/*.rs`: Rust integration tests that talk to those processes with clients nobody here
//!   wrote (librdkafka through the `rdkafka` crate) and with raw sockets for bad input;
//! - `compat/`: the Python/kcat compatibility suite (kafka-python, confluent-kafka, kcat);
//! - `run-all.sh`: the one command that installs what the tests need and runs all of them.
//!
//! No mocks of the broker: every test here runs the real binary.

pub mod jepsen;
pub mod lossyfs;
pub mod page_cache;
pub mod proxy;
pub mod raw;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Build `bin` of workspace package `package` (debug profile) and return its path.
fn build_bin(package: &str, bin: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-q", "-p", package, "--bin", bin])
        .current_dir(&root)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building {bin} failed");
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| root.join("target"));
    target.join("debug").join(bin)
}

/// A test that cannot run on this machine says so: on stderr, and in the file
/// `TESTS_SKIP_LOG` names (the run-all script lists that file at its end), never silently.
pub fn report_skip(test: &str, why: &str) {
    use std::io::Write as _;
    eprintln!("SKIPPED {test}: {why}");
    if let Ok(file) = std::env::var("TESTS_SKIP_LOG") {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .and_then(|mut f| writeln!(f, "SKIPPED {test}: {why}"));
    }
}

/// Path of the `sluice` binary (`TEST_SLUICE_BIN`, or built once per test process).
pub fn sluice_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var("TEST_SLUICE_BIN") {
        Ok(p) => PathBuf::from(p),
        Err(_) => build_bin("sluice-broker", "sluice"),
    })
    .clone()
}

/// Path of the `sluicectl` binary, built once per test process.
pub fn sluicectl_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var("TEST_SLUICECTL_BIN") {
        Ok(p) => PathBuf::from(p),
        Err(_) => build_bin("sluice-tools", "sluicectl"),
    })
    .clone()
}

/// Build a binary of this crate (`tests/src/bin`).
pub(crate) fn build_test_bin(bin: &str) -> PathBuf {
    build_bin("sluice-tests", bin)
}

/// Path of the `jepsen` fault-test harness binary, built once per test process.
pub fn jepsen_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_bin("sluice-tests", "jepsen")).clone()
}

/// Bytes of the segment files (`*.log`) in a partition or internal-log directory (its indexes
/// are preallocated, so their length says nothing about what the log holds).
pub fn segment_file_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum()
}

/// A free TCP port on 127.0.0.1, for a broker to bind later (the probe's listener is closed
/// before returning). Taken below Linux's ephemeral range (32768–60999), walking a range from a
/// per-process start and never handing out the same port twice in a process: a port the kernel
/// picked (`bind(0)`) could be given to an outgoing connection — the tests open thousands —
/// before the broker binds it, and the broker then exited at startup ("Address in use").
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let port = (LOW + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("bind 127.0.0.1:0")
}

/// A real broker process.
pub struct Broker {
    pub port: u16,
    pub data_dir: PathBuf,
    pub extra_args: Vec<String>,
    /// The broker's `SLUICE_LOG` (default: `TEST_SLUICE_LOG`, else `warn`).
    pub log_filter: Option<String>,
    child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
}

impl Broker {
    /// Start a broker with a fresh data directory.
    pub fn start() -> Broker {
        Self::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> Broker {
        Self::start_on(free_port(), args)
    }

    /// Start a broker whose (first) listener is on `port`; `args` may give `--listeners`
    /// (then one of them must be on `port`).
    pub fn start_on(port: u16, args: &[&str]) -> Broker {
        Self::start_on_logging(port, args, None)
    }

    /// [`Broker::start_on`] with the broker's log filter (`SLUICE_LOG`), for a test that reads
    /// the broker's INFO lines.
    pub fn start_on_logging(port: u16, args: &[&str], log_filter: Option<&str>) -> Broker {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut b = Broker {
            port,
            data_dir: tmp.path().join("data"),
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            log_filter: log_filter.map(str::to_string),
            child: None,
            _tmp: Some(tmp),
        };
        b.spawn();
        b
    }

    /// Start a broker on a data directory the caller owns (a lossyfs mount, say); its log goes
    /// beside it (`<data_dir>.log`).
    pub fn start_in(data_dir: PathBuf, args: &[&str]) -> Broker {
        let mut b = Broker {
            port: free_port(),
            data_dir,
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            log_filter: None,
            child: None,
            _tmp: None,
        };
        b.spawn();
        b
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// (Re)start the process on the same port and data directory; waits until it listens.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "broker already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.with_extension("log"))
            .expect("open broker log");
        let mut cmd = Command::new(sluice_bin());
        // `port` is the listener this harness waits for; callers may name more listeners
        if !self.extra_args.iter().any(|a| a == "--listeners") {
            cmd.arg("--listeners").arg(format!("PLAINTEXT://127.0.0.1:{}", self.port));
        }
        // The broker refuses unknown SLUICE_* variables; the caller's environment must not leak in.
        for (k, _) in std::env::vars() {
            if k.starts_with("SLUICE_") {
                cmd.env_remove(k);
            }
        }
        // the suites run with either format of replicated partitions' Raft logs (decision 0045)
        if let Ok(format) = std::env::var("TEST_REPLICATION_LOG_FORMAT") {
            if !self.extra_args.iter().any(|a| a == "--replication-log-format") {
                cmd.arg("--replication-log-format").arg(format);
            }
        }
        let child = cmd
            .arg("--log-dirs")
            .arg(&self.data_dir)
            .args(&self.extra_args)
            .env(
                "SLUICE_LOG",
                self.log_filter
                    .clone()
                    .or_else(|| std::env::var("TEST_SLUICE_LOG").ok())
                    .unwrap_or_else(|| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn sluice");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!("broker exited at startup with {status}: {}", self.log_tail());
                }
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("broker did not listen within 20 s: {}", self.log_tail());
    }

    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(self.data_dir.with_extension("log")).unwrap_or_default();
        s.chars().rev().take(3000).collect::<String>().chars().rev().collect()
    }

    /// The broker process's id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The broker process's resident memory in bytes (Linux `/proc`), if it runs.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let kb: u64 = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// The lines of the broker's log that report a panic, with the line after each.
    pub fn panics(&self) -> String {
        let s = std::fs::read_to_string(self.data_dir.with_extension("log")).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        let mut out = String::new();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("panicked") {
                out.push_str(l);
                out.push('\n');
                if let Some(next) = lines.get(i + 1) {
                    out.push_str(next);
                    out.push('\n');
                }
            }
        }
        out
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill").args([sig, &c.id().to_string()]).status();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        self.signal("-TERM");
        let mut c = self.child.take()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return s.code();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9: no chance to flush or mark anything clean.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP, and wait until every thread of the broker is observed stopped: kill(2) only
    /// queues the signal, and a busy broker thread could otherwise still answer a request sent
    /// right after `pause` returns.
    pub fn pause(&self) {
        self.signal("-STOP");
        if let Some(c) = &self.child {
            wait_until_stopped(c.id());
        }
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

/// Poll `/proc/<pid>/task/*/stat` until every thread is in state `T` (stopped), for at most 5 s.
pub fn wait_until_stopped(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        let all_stopped = tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                // the state follows the parenthesised command name, which may contain spaces
                .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T') || rest.starts_with('t')))
                .unwrap_or(true)
        });
        if all_stopped {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
    }
}
