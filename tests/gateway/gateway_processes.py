"""What the real-client suites of rkv-gateway share (redis_clients_test.py,
memcached_clients_test.py): an rkv-server and an rkv-gateway in front of it
as child processes, the skip rule, and the command line that runs one
client's test.

A suite calls main(__doc__, tests, protocol, gateway_flags): argv is
CLIENT RKV_GATEWAY RKV_SERVER; tests[CLIENT](processes) runs against a
fresh server and gateway in a temp dir, raising on failure (the reason and
the processes' logs are printed, exit 1) or calling skip() (exit 77,
ctest's skip; a failure under RKV_NO_SKIP=1). Both processes are stopped
whatever happens.
"""

import os
import re
import subprocess
import sys
import tempfile
import time

SKIP = 77
# Generous: bounds a hang on a loaded machine; nothing waits for it to pass.
WAIT_S = 120


class Failed(Exception):
    pass


def skip(why):
    if os.environ.get("RKV_NO_SKIP") == "1":
        print(f"FAIL: {why} (RKV_NO_SKIP=1)")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def tail(path, lines=40):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def wait_for_line(path, pattern, proc, what, log_path, timeout=WAIT_S):
    """The first match of `pattern` in the file `path`, written by `proc`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        if proc.poll() is not None:
            raise Failed(f"{what} exited with status {proc.returncode} during start-up; its log:\n" + tail(log_path))
        time.sleep(0.05)
    raise Failed(f"{what} did not start within {timeout} s")


class Processes:
    """An rkv-server (tcp, 512 MiB) and an rkv-gateway on it with
    `gateway_flags`, serving `protocol` ("redis" or "memcached") clients
    at host:port."""

    def __init__(self, gateway_bin, server_bin, tmp, protocol, gateway_flags):
        self.procs = []
        self.tmp = tmp
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write(f"{protocol}-clients-token\n")
        os.chmod(token, 0o600)
        server_out = os.path.join(tmp, "server.out")
        self.server_log = os.path.join(tmp, "server.log")
        self.server = self.start(
            [server_bin, "--listen=127.0.0.1:0", f"--token_file={token}", f"--data_dir={tmp}/data",
             "--transport=tcp", "--memory=536870912"], server_out, self.server_log)
        address = wait_for_line(server_out, r"listening on (\S+)", self.server, "rkv-server",
                                self.server_log).group(1)
        gateway_out = os.path.join(tmp, "gateway.out")
        self.gateway_log = os.path.join(tmp, "gateway.log")
        self.gateway = self.start(
            [gateway_bin, f"--server={address}", f"--token_file={token}", "--transport=tcp", *gateway_flags],
            gateway_out, self.gateway_log)
        m = wait_for_line(gateway_out, rf"{protocol} listening on (\S+):(\d+)", self.gateway, "rkv-gateway",
                          self.gateway_log)
        self.host, self.port = m.group(1), int(m.group(2))

    def start(self, argv, out_path, log_path):
        """Starts `argv` with its stdout and stderr in files; stopped by stop()."""
        with open(out_path, "w") as out, open(log_path, "w") as log:
            p = subprocess.Popen(argv, stdout=out, stderr=log, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def gateway_errors(self):
        """glog ERROR and FATAL lines of the gateway's log."""
        with open(self.gateway_log, errors="replace") as f:
            return [line for line in f if line[:1] in ("E", "F") and re.match(r"[EF]\d{8} ", line)]

    def logs(self):
        text = ""
        for name, path in (("rkv-gateway", self.gateway_log), ("rkv-server", self.server_log)):
            text += f"--- {name} log (last 40 lines)\n" + tail(path)
        return text

    def stop(self):
        """SIGTERM, the last started first; SIGKILL after 30 s."""
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def main(doc, tests, protocol, gateway_flags):
    """Runs the test that argv names; returns the exit status."""
    if len(sys.argv) != 4 or sys.argv[1] not in tests:
        print(doc, file=sys.stderr)
        return 2
    client, gateway_bin, server_bin = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix=f"rkv-{protocol}-clients-") as tmp:
        p = None
        try:
            p = Processes(gateway_bin, server_bin, tmp, protocol, gateway_flags)
            tests[client](p)
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
