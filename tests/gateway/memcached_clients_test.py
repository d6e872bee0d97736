#!/usr/bin/env python3
"""Real memcached clients against rkv-gateway on a real rkv-server.

Usage: memcached_clients_test.py CLIENT RKV_GATEWAY RKV_SERVER

CLIENT is one of
  memcapable       libmemcached's protocol conformance suite, ASCII tests
                   (`memcapable -a`; Debian names it memccapable), in full;
  memcslap         libmemcached's load generator: set, get and mget runs
                   with several threads, no errors, every get a hit;
  node_memcached   Node.js's `memcached` package (tests/gateway/node/,
                   its modules installed there by `npm install`).

The gateway runs with --allow_flush (memcapable flushes). Exits 77 (ctest's
skip) when the client is not installed, unless RKV_NO_SKIP=1, where a
missing client fails like any other failure.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(HERE, "node")


def skip(why):
    if os.environ.get("RKV_NO_SKIP") == "1":
        print(f"FAIL: {why} (RKV_NO_SKIP=1)")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def wait_for_line(path, pattern, proc, what, timeout=120):
    """The first match of `pattern` in the file `path`, written by `proc`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} during start-up")
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start within {timeout} s")


class Processes:
    """An rkv-server and an rkv-gateway serving memcached on it."""

    def __init__(self, gateway_bin, server_bin, tmp):
        self.procs = []
        self.tmp = tmp
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write("memcached-clients-token\n")
        os.chmod(token, 0o600)
        server_out = os.path.join(tmp, "server.out")
        self.server_log = os.path.join(tmp, "server.log")
        server = self.start(
            [server_bin, "--listen=127.0.0.1:0", f"--token_file={token}", f"--data_dir={tmp}/data",
             "--transport=tcp", "--memory=536870912"], server_out, self.server_log)
        address = wait_for_line(server_out, r"listening on (\S+)", server, "rkv-server").group(1)
        gateway_out = os.path.join(tmp, "gateway.out")
        self.gateway_log = os.path.join(tmp, "gateway.log")
        gateway = self.start(
            [gateway_bin, f"--server={address}", f"--token_file={token}", "--transport=tcp",
             "--memcached_listen=127.0.0.1:0", "--redis_listen=", "--allow_flush"], gateway_out, self.gateway_log)
        m = wait_for_line(gateway_out, r"memcached listening on (\S+):(\d+)", gateway, "rkv-gateway")
        self.host, self.port = m.group(1), int(m.group(2))

    def start(self, argv, out_path, log_path):
        with open(out_path, "w") as out, open(log_path, "w") as log:
            p = subprocess.Popen(argv, stdout=out, stderr=log, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def logs(self):
        text = ""
        for path in (self.gateway_log, self.server_log):
            with open(path, errors="replace") as f:
                text += f"--- {os.path.basename(path)} (last 40 lines)\n" + "".join(f.readlines()[-40:])
        return text

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


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


TESTS = {"memcapable": test_memcapable, "memcslap": test_memcslap, "node_memcached": test_node_memcached}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in TESTS:
        print(__doc__, file=sys.stderr)
        return 2
    client, gateway_bin, server_bin = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="rkv-memcached-clients-") as tmp:
        p = None
        try:
            p = Processes(gateway_bin, server_bin, tmp)
            TESTS[client](p)
        except SystemExit:
            raise
        except Exception as e:  # the reason and the processes' logs
            print(f"FAIL: {client}: {e}")
            if p is not None:
                print(p.logs())
            return 1
        finally:
            if p is not None:
                p.stop()
    print(f"PASS: {client}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
