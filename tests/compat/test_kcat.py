"""Debian's kcat (librdkafka 2.0.2, an old client that is picky about ApiVersions)."""
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by tests/run-all.sh")


def kcat(b, *args, input=None, timeout=60):
    r = subprocess.run(["kcat", "-b", b.bootstrap, *args], input=input, capture_output=True, timeout=timeout)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


def test_version_is_old():
    out = subprocess.run(["kcat", "-V"], capture_output=True).stdout.decode()
    assert "librdkafka" in out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume(broker, codec):
    lines = "".join("line-%d\n" % i for i in range(300))
    kcat(broker, "-P", "-t", "k-" + codec, "-z", codec, "-K", ":", input=("".join("k%d:v%d\n" % (i, i) for i in range(300))).encode())
    out = kcat(broker, "-C", "-t", "k-" + codec, "-e", "-f", "%o %k %s\n")
    assert out.splitlines() == ["%d k%d v%d" % (i, i, i) for i in range(300)]
    del lines


def test_metadata_and_offsets(broker):
    kcat(broker, "-P", "-t", "kmeta", input=b"a\nb\nc\n")
    md = kcat(broker, "-L", "-t", "kmeta")
    assert 'topic "kmeta" with 1 partitions' in md
    out = kcat(broker, "-C", "-t", "kmeta", "-o", "-2", "-e", "-f", "%o %s\n")
    assert out.splitlines() == ["1 b", "2 c"]


def test_restart_after_sigterm(broker):
    kcat(broker, "-P", "-t", "krestart", input="".join("%d\n" % i for i in range(1000)).encode())
    assert broker.stop() == 0
    broker.start()
    out = kcat(broker, "-C", "-t", "krestart", "-e", "-f", "%s\n")
    assert out.splitlines() == [str(i) for i in range(1000)]
