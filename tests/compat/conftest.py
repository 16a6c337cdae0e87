"""Fixtures: a real `sluice` broker process on a free 127.0.0.1 port with its own data dir."""
import itertools
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

TEST_SLUICE_BIN = os.environ.get("TEST_SLUICE_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target", "debug", "sluice")


_NEXT_PORT = itertools.count()


def free_port():
    """A free port below Linux's ephemeral range (32768-60999), never the same twice in this
    process: a port the kernel picks (bind to 0) can go to an outgoing connection before the
    broker binds it (tests/src/lib.rs::free_port says more)."""
    # under pytest-xdist each worker takes its own slice of the range, so two workers never
    # pick the same port between one's check and its broker's bind
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
    width = 12000 // max(workers, 1)
    low = 20000 + worker * width
    start = (os.getpid() * 7919) % width
    for _ in range(width):
        port = low + (start + next(_NEXT_PORT)) % width
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, data_dir, port, extra=(), listeners=None):
        self.data_dir = data_dir
        self.port = port
        self.extra = list(extra)
        # the listeners setting; the broker counts as started once `port` accepts connections
        self.listeners = listeners or f"PLAINTEXT://127.0.0.1:{port}"
        self.proc = None
        self.log_path = os.path.join(os.path.dirname(data_dir), f"broker-{port}.log")

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        log = open(self.log_path, "ab")
        # the broker refuses unknown SLUICE_* variables: pass none of the caller's
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        self.proc = subprocess.Popen(
            [TEST_SLUICE_BIN, "--log-dirs", self.data_dir,
             "--listeners", self.listeners, *self.extra],
            stdout=log, stderr=log, env=env)
        # every listener, not only `port`: a test may go straight to another one (a CI run once
        # found a SASL listener refusing connections while the PLAINTEXT one accepted)
        waiting = {self.port} | {int(l.rsplit(":", 1)[1]) for l in self.listeners.split(",")}
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: " + open(self.log_path).read()[-2000:])
            for port in sorted(waiting):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    waiting.discard(port)
                except OSError:
                    pass
            if not waiting:
                # the ports are ours only if this process is still the one running
                if self.proc.poll() is not None:
                    raise RuntimeError(f"broker exited with {self.proc.returncode}: "
                                       + open(self.log_path).read()[-2000:])
                return self
            time.sleep(0.05)
        raise RuntimeError(f"broker did not start listening on {sorted(waiting)} (pid {self.proc.pid}, "
                           f"running: {self.proc.poll() is None}): " + open(self.log_path).read()[-2000:])

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=timeout)
        rc = self.proc.returncode if self.proc else None
        self.proc = None
        return rc

    def kill9(self):
        return self.stop(signal.SIGKILL)

    def restart(self, sig=signal.SIGTERM):
        self.stop(sig)
        return self.start()


@pytest.fixture
def broker():
    with tempfile.TemporaryDirectory() as d:
        b = Broker(os.path.join(d, "data"), free_port()).start()
        try:
            yield b
        finally:
            b.kill9()


FAULTPROXY_BIN = os.environ.get("TEST_FAULTPROXY_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target", "debug", "faultproxy")


class FaultProxy:
    """The Rust fault-injecting proxy (tests/src/proxy.rs) as a process."""

    def __init__(self, target_port, drop_per_mille, stats_file, seed=1):
        self.stats_file = stats_file
        self.proc = subprocess.Popen([FAULTPROXY_BIN, "--target", str(target_port), "--drop-per-mille",
                                      str(drop_per_mille), "--seed", str(seed), "--stats-file", stats_file],
                                     stdout=subprocess.PIPE)
        self.port = int(self.proc.stdout.readline())

    def dropped(self):
        time.sleep(0.3)
        try:
            return int(open(self.stats_file).read() or 0)
        except FileNotFoundError:
            return 0

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def broker_behind_proxy():
    """A broker that advertises a proxy dropping 1.5% of responses (connection cut after the
    broker acted on the request)."""
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        proxy = FaultProxy(port, 15, os.path.join(d, "proxy-stats"))
        b = Broker(os.path.join(d, "data"), port,
                   extra=["--advertised-listeners", f"PLAINTEXT://127.0.0.1:{proxy.port}", "--num-partitions", "4"])
        b.start()
        b.proxy = proxy
        try:
            yield b
        finally:
            b.kill9()
            proxy.stop()


def topic_name(request_or_name):
    base = getattr(request_or_name, "node", None)
    name = base.name if base else str(request_or_name)
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:200]
