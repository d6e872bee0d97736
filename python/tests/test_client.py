"""The Python module rkv against a real rkv-server over tcp on loopback.

The ctest python_module runs this with PYTHONPATH set to the built module's
folder and RKV_SERVER_BIN naming the rkv-server binary.
"""

import array
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

import rkv

TOKEN = "python-module-test-token"
MAX_KEY_BYTES = 64


class Server:
    """An rkv-server (or rkv-coordinator) process on 127.0.0.1, port 0, in
    its own folder, with the token file TOKEN."""

    def __init__(self, folder, *flags, binary_env="RKV_SERVER_BIN", transport="tcp"):
        binary = os.environ.get(binary_env)
        assert binary, binary_env + " must name the binary"
        self.name = os.path.basename(binary)
        os.makedirs(folder)
        self.token_file = os.path.join(folder, "token")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        self.out_path = os.path.join(folder, "out")
        self.log_path = os.path.join(folder, "log")
        args = [binary, "--listen=127.0.0.1:0", "--data_dir=" + os.path.join(folder, "data"),
                "--token_file=" + self.token_file]
        if transport:
            args.append("--transport=" + transport)
        with open(self.out_path, "wb") as out, open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(args + list(flags), stdout=out, stderr=log)
        self.address = self._wait_listening()

    def _wait_listening(self):
        # Start-up is bounded by the process itself: it exits on a bad flag.
        prefix = self.name + " listening on "
        for _ in range(6000):
            with open(self.out_path) as f:
                for line in f:
                    if line.startswith(prefix):
                        return line[len(prefix):].split()[0]
            if self.process.poll() is not None:
                raise RuntimeError(self.name + " exited at start:\n" + self.log())
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(self.name + " did not report listening:\n" + self.log())

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def freeze(self):
        """SIGSTOP, then waits until every thread stopped: the signal stops
        them asynchronously, and a thread running on another CPU answers a
        request or two meanwhile."""
        self.process.send_signal(signal.SIGSTOP)
        tasks = "/proc/%d/task" % self.process.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                states = []
                for tid in os.listdir(tasks):
                    with open(os.path.join(tasks, tid, "stat")) as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:  # a thread, or the process, ended meanwhile
                continue
            if all(state in ("T", "t") for state in states):
                return
            time.sleep(0.0002)

    def thaw(self):
        self.process.send_signal(signal.SIGCONT)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("rkv") / "server"),
               "--memory=16M", "--max_keys=4096", "--max_key_bytes=%d" % MAX_KEY_BYTES)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A coordinator and one server that joined it: (coordinator, server)."""
    folder = tmp_path_factory.mktemp("rkv-cluster")
    coordinator = Server(str(folder / "coordinator"), "--servers=1",
                         binary_env="RKV_COORDINATOR_BIN", transport=None)
    try:
        member = Server(str(folder / "server"), "--memory=16M", "--max_keys=4096",
                        "--coordinator=" + coordinator.address)
    except Exception:
        coordinator.stop()
        raise
    yield coordinator, member
    member.stop()
    coordinator.stop()


@pytest.fixture
def client(server):
    with rkv.Client(server=server.address, token=TOKEN, transport="tcp") as c:
        yield c


# ---- the calls


def test_put_get_versions(client):
    v1 = client.put(b"k:put", b"one")
    v2 = client.put(b"k:put", b"two")
    assert isinstance(v1, int) and v2 > v1
    assert client.get(b"k:put") == b"two"
    assert client.get_versioned(b"k:put") == (b"two", v2)


def test_conditional_put_is_a_compare_and_set(client):
    v1 = client.put(b"k:cas", b"one", if_absent=True)
    with pytest.raises(rkv.FailedPrecondition) as absent:
        client.put(b"k:cas", b"two", if_absent=True)
    assert absent.value.reason == "CONDITION_FAILED"
    assert f"version {v1}" in str(absent.value)
    v2 = client.put(b"k:cas", b"two", if_version=v1)
    with pytest.raises(rkv.PreconditionFailed):
        client.put(b"k:cas", b"three", if_version=v1)
    assert client.get_versioned(b"k:cas") == (b"two", v2)
    with pytest.raises(ValueError):
        client.put(b"k:cas", b"x", if_version=v2, if_absent=True)
    with pytest.raises(ValueError):
        client.put(b"k:cas", b"x", if_version=0)


def test_a_key_put_with_a_ttl_expires(client):
    client.put(b"k:ttl-long", b"stays", ttl=3600)
    left = client.ttl(b"k:ttl-long")
    assert 3500 < left <= 3600
    client.put(b"k:ttl-none", b"forever")
    assert client.ttl(b"k:ttl-none") is None
    client.put(b"k:ttl-short", b"soon gone", ttl=0.2)
    # Waited for, never timed: the key reads as absent once its deadline
    # has passed, whatever the machine's load.
    for _ in range(600):
        try:
            client.get(b"k:ttl-short")
        except rkv.NotFound:
            break
        time.sleep(0.05)
    with pytest.raises(rkv.NotFound):
        client.get(b"k:ttl-short")
    with pytest.raises(rkv.NotFound):
        client.ttl(b"k:ttl-short")
    for bad in (0, -1, 1e12):
        with pytest.raises(ValueError):
            client.put(b"k:ttl-bad", b"x", ttl=bad)


def test_conditional_delete_removes_only_that_version(client):
    v1 = client.put(b"k:cad", b"one")
    v2 = client.put(b"k:cad", b"two")
    with pytest.raises(rkv.PreconditionFailed) as stale:
        client.delete(b"k:cad", if_version=v1)
    assert f"version is {v2}" in str(stale.value)
    assert client.get(b"k:cad") == b"two"
    client.delete(b"k:cad", if_version=v2)
    with pytest.raises(rkv.NotFound):
        client.get(b"k:cad")
    with pytest.raises(ValueError):
        client.delete(b"k:cad", if_version=0)


def test_str_and_bytes_like_arguments(client):
    client.put("k:str", "h\u00e9llo")
    assert client.get(b"k:str") == "h\u00e9llo".encode()
    client.put(bytearray(b"k:ba"), memoryview(b"from a memoryview"))
    assert client.get("k:ba") == b"from a memoryview"
    with pytest.raises(TypeError):
        client.put(42, b"v")
    with pytest.raises(TypeError):
        client.get(None)


def test_binary_and_empty_values(client):
    value = bytes(range(256)) * 4
    client.put(b"k:\x00bin", value)
    assert client.get(b"k:\x00bin") == value
    client.put(b"k:empty", b"")
    assert client.get(b"k:empty") == b""


def test_delete_and_not_found(client):
    client.put(b"k:del", b"v")
    client.delete(b"k:del")
    with pytest.raises(rkv.NotFound) as got:
        client.get(b"k:del")
    assert isinstance(got.value, KeyError)
    assert isinstance(got.value, rkv.Error)
    assert got.value.code == "NOT_FOUND"
    assert str(got.value.args[0])
    with pytest.raises(KeyError):
        client.get_versioned(b"k:del")
    with pytest.raises(rkv.NotFound):
        client.delete(b"k:del")


def test_multi_calls(client):
    versions = client.multi_put({b"m:a": b"1", b"m:b": b"2"})
    assert len(versions) == 2 and all(isinstance(v, int) for v in versions)
    versions = client.multi_put([(b"m:c", b"3"), ("m:a", "1b")])
    assert len(versions) == 2
    assert client.multi_get([b"m:a", b"m:b", b"m:c", b"m:absent"]) == [b"1b", b"2", b"3", None]
    assert client.multi_get([]) == []
    assert client.multi_delete([b"m:a", b"m:absent", "m:b"]) == [True, False, True]
    assert client.multi_get([b"m:a", b"m:c"]) == [None, b"3"]
    with pytest.raises(ValueError):
        client.multi_put([(b"m:x",)])


def test_multi_item_error_raises(client):
    with pytest.raises(rkv.InvalidArgument) as got:
        client.multi_get([b"m:ok", b"x" * (MAX_KEY_BYTES + 1)])
    assert "item 1" in str(got.value)
    with pytest.raises(rkv.InvalidArgument):
        client.multi_put([(b"x" * (MAX_KEY_BYTES + 1), b"v")])


def get_into_counts(client):
    """(get_into_in_place, get_into_copied) of the client's stats()."""
    stats = client.stats()
    return stats["get_into_in_place"], stats["get_into_copied"]


def test_get_into(client):
    # Unregistered memory: each value is copied once.
    client.put(b"k:into", b"0123456789")
    in_place, copied = get_into_counts(client)
    buffer = bytearray(16)
    assert client.get_into(b"k:into", buffer) == 10
    assert bytes(buffer[:10]) == b"0123456789"

    backing = bytearray(b"." * 20)
    assert client.get_into(b"k:into", memoryview(backing)[5:15]) == 10
    assert backing == b"....." + b"0123456789" + b"....."

    exact = bytearray(10)
    assert client.get_into(b"k:into", exact) == 10 and exact == b"0123456789"
    assert get_into_counts(client) == (in_place, copied + 3)


def test_get_into_too_small(client):
    client.put(b"k:into-big", b"x" * 100)
    for registered in (False, True):
        small = bytearray(99)
        registration = client.register_buffer(small) if registered else None
        with pytest.raises(rkv.BufferTooSmall) as got:
            client.get_into(b"k:into-big", small)
        assert got.value.needed == 100
        assert got.value.code == "OUT_OF_RANGE"
        assert isinstance(got.value, rkv.OutOfRange)
        with pytest.raises(rkv.BufferTooSmall) as empty:
            client.get_into(b"k:into-big", bytearray())
        assert empty.value.needed == 100
        with pytest.raises(rkv.NotFound):
            client.get_into(b"k:into-absent", small)
        if registration is not None:
            registration.unregister()
    with pytest.raises((TypeError, BufferError)):
        client.get_into(b"k:into-big", b"read-only bytes")


def test_get_into_a_registered_buffer_reads_in_place(client):
    values = {b"k:reg:%d" % n: (bytes(range(256)) * 40)[:n] for n in (0, 1, 10, 100, 5000)}
    for key, value in values.items():
        client.put(key, value)
    in_place, copied = get_into_counts(client)
    buffer = bytearray(8192)
    calls = 0
    with client.register_buffer(buffer) as registration:
        assert registration.registered
        assert registration.nbytes == len(buffer)
        assert registration.buffer is buffer
        for key, value in values.items():
            for _ in range(2):  # a location cache miss, then a hit
                assert client.get_into(key, buffer) == len(value)
                assert buffer[:len(value)] == value
                # A slice of the registered buffer is read into in place too.
                with memoryview(buffer)[1000:1000 + len(value) + 64] as view:
                    assert client.get_into(key, view) == len(value)
                    assert view[:len(value)] == value
                calls += 2
        assert get_into_counts(client) == (in_place + calls, copied)
    assert not registration.registered and registration.nbytes == 0


def test_get_into_writes_nothing_outside_the_buffer(client):
    client.put(b"k:reg-bounds", b"0123456789")
    backing = bytearray(b"." * 300)
    with client.register_buffer(backing):
        # An exact fit: the block's padding goes elsewhere.
        assert client.get_into(b"k:reg-bounds", memoryview(backing)[5:15]) == 10
        assert backing == b"....." + b"0123456789" + b"." * 285
        # Room to spare: bytes past the value may be overwritten, those past
        # the buffer never are.
        assert client.get_into(b"k:reg-bounds", memoryview(backing)[100:200]) == 10
        assert backing[100:110] == b"0123456789"
        assert backing[:100] == b"....." + b"0123456789" + b"." * 85
        assert backing[200:] == b"." * 100


def test_get_into_an_array_in_place(client):
    value = bytes(range(256)) * 8
    client.put(b"k:reg-array", value)
    in_place, copied = get_into_counts(client)
    buffer = array.array("B", bytes(4096))
    with client.register_buffer(buffer):
        assert client.get_into(b"k:reg-array", buffer) == len(value)
    assert buffer.tobytes()[:len(value)] == value
    assert get_into_counts(client) == (in_place + 1, copied)


def test_get_into_a_numpy_array_in_place(client):
    numpy = pytest.importorskip("numpy")
    value = bytes(range(256)) * 8
    client.put(b"k:reg-numpy", value)
    in_place, copied = get_into_counts(client)
    buffer = numpy.zeros(4096, dtype=numpy.uint8)
    with client.register_buffer(buffer):
        assert client.get_into(b"k:reg-numpy", buffer) == len(value)
        assert client.get_into(b"k:reg-numpy", buffer[1024:]) == len(value)
    assert buffer[:len(value)].tobytes() == value
    assert buffer[1024:1024 + len(value)].tobytes() == value
    assert get_into_counts(client) == (in_place + 2, copied)
    with pytest.raises((BufferError, ValueError, TypeError)):
        client.register_buffer(buffer[::2])  # not contiguous


def test_register_buffer_refuses_overlaps_and_bad_buffers(client):
    backing = bytearray(4096)
    with client.register_buffer(memoryview(backing)[1024:2048]):
        with pytest.raises(rkv.AlreadyExists) as got:
            client.register_buffer(backing)
        assert got.value.code == "ALREADY_EXISTS"
        with pytest.raises(rkv.AlreadyExists):
            client.register_buffer(memoryview(backing)[2047:2057])
        # Memory beside it is free.
        with client.register_buffer(memoryview(backing)[2048:]):
            pass
    # The freed range can be registered again.
    client.register_buffer(backing).unregister()
    with pytest.raises(rkv.InvalidArgument):
        client.register_buffer(bytearray())
    with pytest.raises((TypeError, BufferError)):
        client.register_buffer(b"read-only bytes")
    with pytest.raises(TypeError):
        client.register_buffer(42)


def test_unregister_then_get_into_copies(client):
    client.put(b"k:reg-unreg", b"value")
    buffer = bytearray(64)
    registration = client.register_buffer(buffer)
    in_place, copied = get_into_counts(client)
    assert client.get_into(b"k:reg-unreg", buffer) == 5
    assert get_into_counts(client) == (in_place + 1, copied)
    registration.unregister()
    registration.unregister()  # again: nothing
    assert not registration.registered
    assert client.get_into(b"k:reg-unreg", buffer) == 5
    assert buffer[:5] == b"value"
    assert get_into_counts(client) == (in_place + 1, copied + 1)


def test_registered_bytearray_cannot_be_resized(client):
    buffer = bytearray(128)
    registration = client.register_buffer(buffer)
    with pytest.raises(BufferError):
        buffer.extend(b"more")
    with pytest.raises(BufferError):
        del buffer[:10]
    assert len(buffer) == 128
    registration.unregister()
    buffer.extend(b"more")
    assert len(buffer) == 132


def test_registration_ends_when_collected(client):
    buffer = bytearray(128)
    client.register_buffer(buffer)  # dropped at once: unregistered
    buffer.extend(b"more")
    client.register_buffer(buffer).unregister()


def test_close_ends_registrations(server):
    buffer = bytearray(128)
    c = rkv.Client(server=server.address, token=TOKEN, transport="tcp")
    registration = c.register_buffer(buffer)
    c.close()
    assert not registration.registered
    buffer.extend(b"more")  # released by the close
    registration.unregister()  # after the close: nothing
    with registration:
        pass
    with pytest.raises(rkv.FailedPrecondition):
        c.register_buffer(bytearray(8))


def test_members_of_one_server(client):
    with pytest.raises(rkv.FailedPrecondition) as got:
        client.members()
    assert rkv.PreconditionFailed is rkv.FailedPrecondition
    assert got.value.code == "FAILED_PRECONDITION"


def test_stats(client):
    client.put(b"k:stats", b"v")
    for _ in range(3):
        client.get(b"k:stats")
    stats = client.stats()
    cache = stats["location_cache"]
    assert cache["enabled"] is True
    assert cache["hits"] + cache["misses"] + cache["fallbacks"] >= 3
    assert cache["capacity_bytes"] > 0
    assert stats["max_key_bytes"] == MAX_KEY_BYTES
    assert stats["max_value_bytes"] > 0
    assert stats["transport"] == "tcp"
    assert stats["cluster_mode"] is False
    assert stats["server_epoch"] > 0
    assert "servers" not in stats
    # The client's own counters: every call went through at once, and its
    # attempts are counted by the server's address.
    assert stats["retries"] == 0
    assert list(stats["attempts_by_server"].values()) and all(
        n >= 1 for n in stats["attempts_by_server"].values())


def test_context_manager_and_close(server):
    with rkv.Client(server=server.address, token=TOKEN) as c:
        assert not c.closed
        c.put(b"k:ctx", b"v")
    assert c.closed
    with pytest.raises(rkv.FailedPrecondition):
        c.get(b"k:ctx")
    c.close()  # again: nothing
    with pytest.raises(RuntimeError):
        with rkv.Client(server=server.address, token=TOKEN) as c2:
            raise RuntimeError("propagates")
    assert c2.closed


def test_token_file(server, tmp_path):
    with rkv.Client(server=server.address, token_file=server.token_file) as c:
        c.put(b"k:tf", b"v")
    with rkv.Client(server=server.address, token_file=os.fspath(server.token_file).encode()) as c:
        assert c.get(b"k:tf") == b"v"
    with pytest.raises(FileNotFoundError):
        rkv.Client(server=server.address, token_file=str(tmp_path / "absent"))
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    with pytest.raises(ValueError):
        rkv.Client(server=server.address, token_file=str(empty))


def test_cluster_mode(cluster):
    coordinator, member = cluster
    # A list, or one comma-separated str (here naming the one coordinator
    # twice).
    with rkv.Client(coordinators=[coordinator.address], token=TOKEN, transport="tcp") as c:
        version = c.put(b"c:key", b"clustered")
        assert c.get_versioned(b"c:key") == (b"clustered", version)
        members = c.members()
        assert len(members) == 1
        m = members[0]
        assert m["state"] == "UP"
        assert m["data_address"] == member.address
        assert m["transport"] == "tcp"
        assert m["shards"] > 0 and m["epoch"] > 0
        stats = c.stats()
        assert stats["cluster_mode"] is True and stats["cluster_map_version"] > 0
        (server_stats,) = stats["servers"].values()
        assert stats["servers"].keys() == {m["server_id"]}
        assert server_stats["epoch"] == m["epoch"]
        assert server_stats["counters"]["puts"] >= 1
    both = coordinator.address + "," + coordinator.address
    with rkv.Client(coordinators=both, token_file=coordinator.token_file) as c:
        assert c.get(b"c:key") == b"clustered"


def test_coordinator_refuses_wrong_token(cluster):
    coordinator, _ = cluster
    with pytest.raises(rkv.Unauthenticated) as got:
        rkv.Client(coordinators=[coordinator.address], token="not-the-token", timeout=2.0)
    assert got.value.code == "UNAUTHENTICATED"
    assert "token" in str(got.value)


def test_tls_files_are_checked_and_named(cluster, tmp_path):
    coordinator, member = cluster
    # A client of one server speaks only the data plane: no TLS to give.
    with pytest.raises(rkv.InvalidArgument) as one_server:
        rkv.Client(server=member.address, token=TOKEN, tls_ca=str(tmp_path / "ca.pem"))
    assert "control plane" in str(one_server.value)
    # A CA file that is missing, or not PEM, is named.
    missing = str(tmp_path / "missing-ca.pem")
    with pytest.raises(rkv.InvalidArgument) as got:
        rkv.Client(coordinators=[coordinator.address], token=TOKEN, tls_ca=missing)
    assert missing in str(got.value)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(rkv.InvalidArgument) as got:
        rkv.Client(coordinators=[coordinator.address], token=TOKEN, tls_ca=str(garbage))
    assert str(garbage) in str(got.value)
    # TLS on the data plane needs the CA its servers are verified against.
    with pytest.raises(rkv.InvalidArgument) as no_ca:
        rkv.Client(server=member.address, token=TOKEN, data_plane_tls=True)
    assert "tls_ca_file" in str(no_ca.value)


def test_a_plain_client_of_a_tls_data_plane_is_told_why(tmp_path):
    """A server started with --data_plane_tls takes TLS clients only."""
    ca_key, ca_crt = str(tmp_path / "ca.key"), str(tmp_path / "ca.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", ca_key, "-out", ca_crt, "-days", "1", "-subj", "/CN=rkv-test",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    s = Server(str(tmp_path / "server"), "--data_plane_tls", "--tls_cert=" + ca_crt, "--tls_key=" + ca_key,
               "--tls_ca=" + ca_crt)
    try:
        with pytest.raises(rkv.PermissionDenied) as got:
            rkv.Client(server=s.address, token=TOKEN, transport="tcp")
        assert "takes TLS only" in str(got.value)
        with rkv.Client(server=s.address, token=TOKEN, transport="tcp", tls_ca=ca_crt, data_plane_tls=True) as c:
            c.put(b"k", b"over tls")
            assert c.get(b"k") == b"over tls"
    finally:
        s.stop()


# ---- errors


def test_error_classes():
    expected = {
        "Cancelled": "CANCELLED", "Unknown": "UNKNOWN", "InvalidArgument": "INVALID_ARGUMENT",
        "DeadlineExceeded": "DEADLINE_EXCEEDED", "NotFound": "NOT_FOUND",
        "AlreadyExists": "ALREADY_EXISTS", "PermissionDenied": "PERMISSION_DENIED",
        "ResourceExhausted": "RESOURCE_EXHAUSTED", "FailedPrecondition": "FAILED_PRECONDITION",
        "Aborted": "ABORTED", "OutOfRange": "OUT_OF_RANGE", "Unimplemented": "UNIMPLEMENTED",
        "Internal": "INTERNAL", "Unavailable": "UNAVAILABLE", "DataLoss": "DATA_LOSS",
        "Unauthenticated": "UNAUTHENTICATED",
    }
    for name, code in expected.items():
        cls = getattr(rkv, name)
        assert issubclass(cls, rkv.Error) and cls.code == code, name
        assert cls.__module__ == "rkv"
    assert issubclass(rkv.Error, Exception)
    assert issubclass(rkv.NotFound, KeyError)
    assert issubclass(rkv.InvalidArgument, ValueError)
    assert issubclass(rkv.BufferTooSmall, rkv.OutOfRange)


def test_wrong_token_is_refused(server):
    with pytest.raises((rkv.PermissionDenied, rkv.Unauthenticated)) as got:
        rkv.Client(server=server.address, token="not-the-token", timeout=2.0)
    assert got.value.code in ("PERMISSION_DENIED", "UNAUTHENTICATED")
    assert "token" in str(got.value)


def test_key_out_of_bounds(client):
    with pytest.raises(rkv.InvalidArgument) as got:
        client.put(b"x" * (MAX_KEY_BYTES + 1), b"v")
    assert isinstance(got.value, ValueError)
    assert got.value.code == "INVALID_ARGUMENT"
    with pytest.raises(rkv.InvalidArgument):
        client.get(b"")


def test_unreachable_server_is_unavailable():
    # A port that was free a moment ago: nothing listens there.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(rkv.Unavailable) as got:
        rkv.Client(server="127.0.0.1:%d" % port, token=TOKEN, transport="tcp", timeout=0.3)
    assert got.value.code == "UNAVAILABLE"
    assert str(got.value)


@pytest.mark.parametrize("kwargs", [
    dict(token=TOKEN),
    dict(server="127.0.0.1:1", coordinators=["127.0.0.1:2"], token=TOKEN),
    dict(server="127.0.0.1:1"),
    dict(server="127.0.0.1:1", token=TOKEN, token_file="t"),
    dict(server="127.0.0.1:1", token=""),
    dict(server="", token=TOKEN),
    dict(server=7700, token=TOKEN),
    dict(coordinators=[], token=TOKEN),
    dict(coordinators="127.0.0.1:1,,127.0.0.1:2", token=TOKEN),
    dict(coordinators=[7600], token=TOKEN),
    dict(server="127.0.0.1:1", token=TOKEN, transport="udp"),
    dict(server="127.0.0.1:1", token=TOKEN, timeout=0),
    dict(server="127.0.0.1:1", token=TOKEN, timeout=-1.0),
    dict(server="127.0.0.1:1", token=TOKEN, timeout=float("nan")),
    dict(server="127.0.0.1:1", token=TOKEN, connections=0),
    dict(server="127.0.0.1:1", token=TOKEN, connections=65),
    dict(coordinators=["127.0.0.1:1"], token=TOKEN, tls_ca=""),
    dict(coordinators=["127.0.0.1:1"], token=TOKEN, tls_ca=7),
])
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        rkv.Client(**kwargs)


def test_resource_exhausted(tmp_path):
    # A heap of 1 MiB holds few 64 KiB values: a PUT is refused once it is
    # full.
    small = Server(str(tmp_path / "small"), "--memory=1M", "--max_keys=1024",
                   "--max_value_bytes=65536", "--ring_bytes=256K")
    try:
        with rkv.Client(server=small.address, token=TOKEN, transport="tcp") as c:
            with pytest.raises(rkv.ResourceExhausted) as got:
                for i in range(64):
                    c.put(b"big:%d" % i, bytes(60000))
            assert got.value.code == "RESOURCE_EXHAUSTED"
    finally:
        small.stop()


# ---- threads


def test_threads_share_a_client(server):
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    errors = []

    def work(n):
        try:
            for i in range(100):
                key = b"t:%d:%d" % (n, i)
                version = c.put(key, key)
                assert c.get_versioned(key) == (key, version)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    with rkv.Client(server=server.address, token=TOKEN, transport="tcp", connections=4) as c:
        counter_thread = threading.Thread(target=count)
        counter_thread.start()
        workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        stop.set()
        counter_thread.join()
    assert errors == []
    assert counter[0] > 0


def test_gil_is_released_while_calls_block(server):
    # The server is frozen (SIGSTOP), so four GETs block inside librkv. The
    # main thread must still run Python meanwhile: it counts with a thread
    # of its own, sees that every GET is still in flight, and only then
    # thaws the server. Were the GIL held by a blocked call, nothing else
    # would run until that call's deadline had passed and it had failed.
    with rkv.Client(server=server.address, token=TOKEN, transport="tcp", connections=4,
                    timeout=10.0) as c:
        c.put(b"k:gil", b"value")
        results = [None] * 4
        started = threading.Semaphore(0)

        def work(n):
            started.release()
            try:
                results[n] = c.get(b"k:gil")
            except Exception as e:  # reported by the main thread
                results[n] = e

        server.freeze()
        try:
            workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
            for w in workers:
                w.start()
            for _ in workers:
                started.acquire()
            counted = [0]

            def count():
                for _ in range(100000):
                    counted[0] += 1

            counter_thread = threading.Thread(target=count)
            counter_thread.start()
            counter_thread.join()
            assert counted[0] == 100000
            assert all(r is None for r in results), results
        finally:
            server.thaw()
        for w in workers:
            w.join()
    assert results == [b"value"] * 4
