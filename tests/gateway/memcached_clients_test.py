#!/usr/bin/env python3
"""Real memcached clients against rkv-gateway on a real rkv-server.

Usage: memcached_clients_test.py CLIENT RKV_GATEWAY RKV_SERVER

CLIENT is one of
  memcapable       libmemcached's protocol conformance suite, ASCII tests
                   (`memcapable -a`; Debian names it memccapable), in full;
  memcslap         libmemcached's load generator: set, get and mget runs
                   with several threads, no errors, every get a hit;
  node_memcached   Node.js's `memcached` package (tests/gateway/node/,
                   its modules installed there by `npm install`);
  memcached_differential
                   request scripts (every command, its errors and edge
                   cases) sent to a real memcached and to the gateway: the
                   replies must be the same bytes;
  memcached_hostile
                   broken and hostile inputs (fuzz seeds, mutated and
                   random bytes, the limits' edges, a pipeline never read):
                   the gateway stays up with bounded memory and serves.

The gateway runs with --allow_flush (memcapable flushes). Exits 77 (ctest's
skip) when the client is not installed, unless RKV_NO_SKIP=1, where a
missing client fails like any other failure.
"""

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time

from gateway_processes import main, skip

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(HERE, "node")


def stats(host, port):
    """The gateway's `stats` as a dict."""
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    out = {}
    for line in data.decode().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def run(argv, timeout=540, cwd=None):
    print("+ " + " ".join(argv), flush=True)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    return r


def test_memcapable(p):
    tool = shutil.which("memcapable") or shutil.which("memccapable")
    if tool is None:
        skip("memcapable (libmemcached-tools) is not installed")
    r = run([tool, "-h", p.host, "-p", str(p.port), "-a", "-v"])
    failed = [line for line in r.stdout.splitlines() if "[pass]" not in line and line.startswith("ascii ")]
    if r.returncode != 0 or "All tests passed" not in r.stdout or failed:
        raise AssertionError(f"memcapable -a: exit {r.returncode}, failed: {failed}")


def test_memcslap(p):
    tool = shutil.which("memcslap") or shutil.which("memslap")
    if tool is None:
        skip("memcslap (libmemcached-tools) is not installed")
    server = f"{p.host}:{p.port}"
    before = stats(p.host, p.port)
    for test in ("set", "get", "mget"):
        r = run([tool, f"--servers={server}", "--concurrency=4", "--execute-number=500", f"--test={test}"])
        output = r.stdout + r.stderr
        if r.returncode != 0 or re.search(r"error|fail", output, re.IGNORECASE):
            raise AssertionError(f"memcslap --test={test}: exit {r.returncode}:\n{output}")
    after = stats(p.host, p.port)
    gets = int(after["cmd_get"]) - int(before["cmd_get"])
    hits = int(after["get_hits"]) - int(before["get_hits"])
    sets = int(after["cmd_set"]) - int(before["cmd_set"])
    print(f"gateway counted {sets} sets, {gets} gets, {hits} hits; backend_errors {after['backend_errors']}")
    if sets == 0 or gets == 0:
        raise AssertionError("memcslap's commands did not reach the gateway")
    if hits != gets:
        raise AssertionError(f"{gets - hits} of memcslap's {gets} gets missed a key it had set")
    if after["backend_errors"] != "0":
        raise AssertionError(f"the gateway counted {after['backend_errors']} rkv errors")


def test_node_memcached(p):
    node = shutil.which("node")
    if node is None:
        skip("node is not installed")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "memcached")):
        skip(f"the npm package memcached is not installed in {NODE_DIR} (cd there and run npm install)")
    r = run([node, os.path.join(NODE_DIR, "memcached_test.js"), f"{p.host}:{p.port}"], cwd=NODE_DIR)
    if r.returncode != 0 or "memcached_test.js: all checks passed" not in r.stdout:
        raise AssertionError(f"memcached_test.js: exit {r.returncode}")


# Request scripts sent both to memcached and to the gateway, whose replies
# must be the same bytes. {k} is a key prefix of the script's own.
DIFFERENTIAL_SCRIPTS = [
    b"set {k}a 5 0 3\r\nabc\r\nget {k}a {k}none\r\nget {k}a {k}a\r\n",
    b"set {k}a 4294967295 0 1\r\nx\r\nget {k}a\r\nset {k}a 4294967296 0 1\r\ny\r\nget {k}a\r\n",
    b"set {k}a +5 0 1\r\nx\r\nget {k}a\r\nset {k}a -1 0 1\r\nx\r\n",
    b"set {k}a 0 0 1 noreply\r\nx\r\nget {k}a\r\nset {k}a 0 0 1 foo\r\ny\r\n",
    b"set {k}a 0 0 3\r\nabcd\r\nset {k}a 0 0 3\r\nab\r\n\r\nset {k}a 0 0 3 noreply\r\nabcd\r\n",
    b"set {k}a x 0 3\r\nabc\r\nset {k}a 0 x 3\r\nabc\r\nset {k}a 0 0 x\r\nabc\r\nset {k}a 0 0 -1\r\n",
    b"set {k}a 0 0\r\nset {k}a 0 0 1 noreply extra\r\nx\r\nset {k}a x 0 3 noreply\r\nabc\r\n",
    # (memcached's meta commands, mg and the like, are not served: ERROR.)
    b"get\r\ngets\r\n\r\n\n\r\r\nGET {k}a\r\nfoo bar\r\n",
    b"get {k}" + b"x" * 246 + b"\r\nget {k}" + b"x" * 247 + b"\r\nset {k}" + b"y" * 247 + b" 0 0 1\r\nx\r\n",
    b"set {k}a 0 0 1\r\nx\r\n  get   {k}a  \r\nset {k}b 0 0 1\nx\r\nget {k}b\n",
    b"add {k}a 1 0 1\r\nx\r\nadd {k}a 2 0 1\r\ny\r\nreplace {k}b 0 0 1\r\nz\r\nreplace {k}a 3 0 1\r\nz\r\nget {k}a\r\n",
    b"append {k}a 0 0 1\r\nx\r\nprepend {k}a 0 0 1\r\nx\r\nset {k}a 7 0 1\r\nx\r\n"
    b"append {k}a 9 0 2\r\nzz\r\nprepend {k}a 9 0 2 noreply\r\nqq\r\nget {k}a\r\n",
    b"cas {k}a 0 0 1 5\r\nx\r\nset {k}a 0 0 1\r\nx\r\ncas {k}a 0 0 1 999999999\r\ny\r\n"
    b"cas {k}a 0 0 1\r\nx\r\ncas {k}a 0 0 1 x\r\nx\r\ncas {k}a 0 0 1 -1\r\nx\r\n",
    b"set {k}n 0 0 2\r\n10\r\nincr {k}n 5\r\ndecr {k}n 100\r\nincr {k}n 18446744073709551615\r\nincr {k}n 1\r\nget {k}n\r\n",
    b"set {k}n 0 0 20\r\n18446744073709551615\r\nincr {k}n 2\r\nget {k}n\r\n",
    b"set {k}n 7 0 4\r\n1000\r\ndecr {k}n 1\r\nget {k}n\r\nincr {k}n 1 noreply\r\nget {k}n\r\n",
    b"set {k}n 0 0 3\r\nabc\r\nincr {k}n 1\r\nset {k}n 0 0 3\r\n 12\r\nincr {k}n 1\r\nset {k}n 0 0 4\r\n12 3\r\n"
    b"incr {k}n 1\r\nget {k}n\r\nset {k}n 0 0 0\r\n\r\nincr {k}n 1\r\nset {k}n 0 0 2\r\n-1\r\nincr {k}n 1\r\n",
    b"set {k}n 0 0 2\r\n10\r\nincr {k}n x\r\nincr {k}n -1\r\nincr {k}n 18446744073709551616\r\n"
    b"incr {k}n\r\nincr {k}n 1 2\r\nincr {k}n 1 2 3\r\nincr {k}none 1\r\ndecr {k}none 1\r\nincr {k}n x noreply\r\n",
    b"set {k}d 0 0 1\r\nx\r\ndelete {k}d\r\ndelete {k}d\r\ndelete {k}d 0\r\ndelete {k}d 5\r\n"
    b"delete {k}d noreply\r\ndelete {k}d 0 noreply\r\ndelete\r\ndelete {k}a {k}b {k}c {k}d\r\n",
    b"touch {k}t 10\r\nset {k}t 0 0 1\r\nx\r\ntouch {k}t 10\r\ntouch {k}t x\r\ntouch {k}t\r\ntouch {k}t 10 20\r\n"
    b"touch {k}t 10 noreply\r\ntouch {k}t -1\r\nget {k}t\r\n",
    b"set {k}g 3 0 1\r\nx\r\ngat 100 {k}g {k}none\r\ngat x {k}g\r\ngat 100\r\ngat\r\ngat -1 {k}g\r\nget {k}g\r\n",
    b"set {k}e 0 -1 1\r\nx\r\nget {k}e\r\nset {k}e 0 1000 1\r\nx\r\nget {k}e\r\n",
    b"verbosity\r\nverbosity 1\r\nverbosity 1 noreply\r\nverbosity x\r\nverbosity 1 2 3\r\nstats reset\r\nstats noreply\r\n",
    b"flush_all x\r\nflush_all 1 2 3\r\nflush_all noreply\r\nflush_all 0\r\n",
    b"set {k}f 0 0 1\r\nx\r\nflush_all\r\nget {k}f\r\nset {k}f 0 0 1\r\ny\r\nget {k}f\r\n",
    b"set {k}q 0 0 1\r\nx\r\nquit\r\nget {k}q\r\n",
    b"set {k}big 0 0 1048577\r\n" + b"z" * 1048577 + b"\r\nget {k}big\r\nset {k}big 0 0 1048577 noreply\r\n"
    + b"z" * 1048577 + b"\r\nget {k}big\r\n",
]


def converse(host, port, data):
    """Sends `data`, then reads until the server closes or is quiet for a
    while after the last byte: the whole answer."""
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(data + b"quit\r\n")
        out = b""
        s.settimeout(60)
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                return out
            out += chunk


def test_differential(p):
    memcached = shutil.which("memcached")
    if memcached is None:
        skip("memcached is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [memcached, "-l", "127.0.0.1", "-p", str(port), "-U", "0"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    mc = p.start(argv, os.path.join(p.tmp, "memcached.out"), os.path.join(p.tmp, "memcached.log"))
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            break
        except OSError:
            if mc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("memcached did not start")
            time.sleep(0.1)
    failures = 0
    for i, script in enumerate(DIFFERENTIAL_SCRIPTS):
        data = script.replace(b"{k}", f"d{i}:".encode())
        want = converse("127.0.0.1", port, data)
        got = converse(p.host, p.port, data)
        if got != want:
            failures += 1
            print(f"script {i}: {data[:300]!r}\n  memcached: {want[:600]!r}\n  gateway:   {got[:600]!r}")
    if failures:
        raise AssertionError(f"{failures} of {len(DIFFERENTIAL_SCRIPTS)} scripts answered otherwise than memcached")
    print(f"{len(DIFFERENTIAL_SCRIPTS)} scripts answered byte for byte as memcached answers them")


def hostile_inputs():
    """What a broken or hostile client may send: the fuzz seeds, seeded
    random bytes and mutations of valid requests, and the limits' edges."""
    corpus = os.path.join(HERE, "..", "..", "fuzz", "corpus", "memcache_parser")
    inputs = []
    for name in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, name), "rb") as f:
            inputs.append(f.read()[2:])  # the fuzz target's limits and split bytes
    rng = random.Random(1)
    valid = [b"set h 0 0 3\r\nabc\r\n", b"get h h h\r\n", b"gets h\r\n", b"incr h 1\r\n", b"gat 10 h\r\n",
             b"cas h 0 0 1 1\r\nx\r\n", b"append h 0 0 1\r\nx\r\n", b"touch h 1\r\n", b"delete h\r\n"]
    for _ in range(200):
        data = bytearray(b"".join(rng.choice(valid) for _ in range(rng.randint(1, 8))))
        for _ in range(rng.randint(0, 6)):
            i = rng.randrange(len(data))
            op = rng.randrange(3)
            if op == 0:
                data[i] = rng.randrange(256)
            elif op == 1:
                del data[i]
            else:
                data[i:i] = bytes([rng.choice(b" \r\n0123456789-+\x00\xff")])
        inputs.append(bytes(data))
    inputs += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000))) for _ in range(50)]
    inputs += [
        b"set h 0 0 2000000000\r\n" + b"x" * 100000,       # a block announced as 2 GB, then a hang-up
        b"get " + b"k " * 600000,                             # a multi-get line past its 1 MiB cap
        b"set " + b"k" * 3000 + b" 0 0 1\r\n",               # a line past 2048 bytes
        b"get h\r\n" * 200000,                               # a pipeline sent without reading
        b"\x80\x00\x00\x05\x00\x00\x00\x00" * 10,        # the binary protocol
    ]
    return inputs


def test_hostile(p):
    """Every hostile input on its own connection, a few at once: the gateway
    answers each as it can, stays up, keeps its memory bounded, and then
    serves a well-behaved client as before."""
    inputs = hostile_inputs()
    rss_limit_kib = 1 << 20  # 1 GiB: generous for a sanitizer build; unbounded growth passes it

    def rss_kib():
        with open(f"/proc/{p.gateway.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    peak = 0
    for start in range(0, len(inputs), 8):
        socks = []
        for data in inputs[start:start + 8]:
            s = socket.create_connection((p.host, p.port), timeout=30)
            try:
                s.sendall(data)
            except OSError:
                pass  # the gateway may close first (a line too long)
            socks.append(s)
        for s in socks:
            s.close()  # without reading: the gateway drops what it had for us
        peak = max(peak, rss_kib())
        if p.gateway.poll() is not None:
            raise AssertionError(f"rkv-gateway exited with {p.gateway.returncode} on inputs {start}..{start + 7}")
    if peak > rss_limit_kib:
        raise AssertionError(f"rkv-gateway's memory reached {peak} KiB")
    got = converse(p.host, p.port, b"set calm 1 0 2\r\nok\r\nget calm\r\n")
    if got != b"STORED\r\nVALUE calm 1 2\r\nok\r\nEND\r\n":
        raise AssertionError(f"after the hostile inputs the gateway answered {got!r}")
    print(f"{len(inputs)} hostile inputs; the gateway's peak memory {peak} KiB; it still serves")


TESTS = {"memcapable": test_memcapable, "memcslap": test_memcslap, "node_memcached": test_node_memcached,
         "memcached_differential": test_differential, "memcached_hostile": test_hostile}


if __name__ == "__main__":
    sys.exit(main(__doc__, TESTS, "memcached", ["--memcached_listen=127.0.0.1:0", "--redis_listen=", "--allow_flush"]))
