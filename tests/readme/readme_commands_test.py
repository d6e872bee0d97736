#!/usr/bin/env python3
"""The README's commands, run as a newcomer pastes them.

Reads README.md, takes every command of its indented code blocks (a
command that opens a quote goes on until the quote closes, as in a shell),
and runs each one with bash from the repository root, in the order a
newcomer follows: `deploy/quickstart.sh` as it stands (its prefix under a
temporary $HOME, as for a user who is not root through sudo), then the one
`export PATH=...` line it prints for a prefix that is not on PATH, then the
`kvctl` lines against its server, the Python example, and the memcached
and Redis lines against the rkv-gateway the quickstart started beside its
server (whose own output must show it and a GET through redis-cli); `deploy/cluster.sh
start`, the cluster's `kvctl` lines, the metrics lines (a real Prometheus
until it has scraped every process) and `stop`; then the etcd cluster of
`start --ha` with its lines; then `start --tls` with its kvctl lines (and
kvctl without the CA, which must fail saying TLS); last
`deploy/quickstart.sh stop`.

Every command in the README is either run here or listed in NOT_RUN with
the reason, and every command named here must still be in the README: a
README line added, changed or removed without this file fails the test.
Each command must exit 0, and where the README says what it prints, its
output must say it.

The fixed ports of the README (7600-7602, 7700-7703, 8600-8703, etcd's
2379-2580, Prometheus's 9090, rkv-gateway's 6380 and 11212) and the folders .rkv-local/ and
.rkv-cluster/ must be free: otherwise the test is skipped (exit 77) with
the reason, unless RKV_NO_SKIP=1 (then it fails). It removes what it made,
also on a failure.

Usage: readme_commands_test.py REPO_ROOT
"""
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import json

SKIP = 77
# Bounds a hang; nothing waits for it to pass. The quickstart may build.
COMMAND_TIMEOUT_S = 1200

# Commands of the README that are not run here, and why.
NOT_RUN = {
    "deploy/test.sh": "it is the command that runs this test",
    "deploy/install-deps.sh": "deploy/quickstart.sh runs it first, above",
    "cmake --preset release && cmake --build --preset release":
        "deploy/quickstart.sh builds the same preset (deploy/build.sh release), above",
    "ctest --preset release": "it runs this test",
    "deploy/package.sh": "the ctest debian_packages runs it",
    "apt-get install ./build/release/packages/*.deb":
        "it changes this machine's packages; deploy/check-packages.sh installs them in a fresh Debian 12 root",
}

PYTHON_EXAMPLE_START = "PYTHONPATH=build/release/python python3 -c '"


class Failed(Exception):
    pass


def readme_commands(readme_text):
    """Commands of the indented code blocks, in order, without the indent."""
    commands = []
    pending = None
    previous_blank = True
    in_block = False
    for line in readme_text.split("\n"):
        if line.startswith("    ") and (in_block or previous_blank):
            in_block = True
            text = line[4:]
            pending = text if pending is None else pending + "\n" + text
            try:
                shlex.split(pending, comments=True)
            except ValueError:  # an open quote: the command goes on
                continue
            if pending.strip():
                commands.append(pending)
            pending = None
            continue
        if pending is not None:
            raise Failed(f"README: a command's quote is never closed: {pending!r}")
        in_block = in_block and line.strip() == ""
        previous_blank = line.strip() == ""
    return commands


class Runner:
    def __init__(self, root, env, log_dir):
        self.root = root
        self.env = env
        self.log_dir = log_dir
        self.ran = []

    def run(self, command, timeout=COMMAND_TIMEOUT_S):
        print(f"$ {command}", flush=True)
        started = time.monotonic()
        p = subprocess.run(["bash", "-c", command], cwd=self.root, env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        shown = out if len(out) < 4000 else out[:1500] + "\n[...]\n" + out[-2000:]
        if shown:
            print(shown, end="" if shown.endswith("\n") else "\n")
        print(f"  (exit {p.returncode}, {time.monotonic() - started:.1f} s)", flush=True)
        self.ran.append(command)
        if p.returncode != 0:
            raise Failed(f"`{command}` exited {p.returncode}; stderr:\n{err[-3000:]}")
        return out, err


def need(what, condition, output):
    if not condition:
        raise Failed(f"{what}; the output was:\n{output[-3000:]}")


def port_in_use(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def busy_reasons(root):
    reasons = []
    for d in (".rkv-local", ".rkv-cluster"):
        if os.path.exists(os.path.join(root, d)):
            reasons.append(f"{d}/ exists (a local server or cluster of yours; "
                           f"stop it and remove {d}/ to run this test)")
    ports = [7600, 7601, 7602, 7700, 7701, 7702, 7703, 8600, 8601, 8602, 8700, 8701, 8702, 8703,
             2379, 2380, 2479, 2480, 2579, 2580, 9090, 6380, 11212]
    taken = [p for p in ports if port_in_use(p)]
    if taken:
        reasons.append("ports the README uses are taken: " + ", ".join(map(str, taken)))
    return reasons


def prometheus_scrapes_everything(runner, command):
    """Starts the README's prometheus line and waits until its targets API
    shows every process of the cluster scraped and up; then stops it."""
    print(f"$ {command}    (until every target is up, then SIGTERM)", flush=True)
    log_path = os.path.join(runner.log_dir, "prometheus.log")
    with open(log_path, "wb") as log:
        p = subprocess.Popen(["bash", "-c", "exec " + command], cwd=runner.root, env=runner.env,
                             stdout=log, stderr=subprocess.STDOUT)
    runner.ran.append(command)
    try:
        deadline = time.monotonic() + 120
        health = {}
        while time.monotonic() < deadline:
            if p.poll() is not None:
                with open(log_path, encoding="utf-8", errors="replace") as f:
                    raise Failed(f"prometheus exited {p.returncode}:\n{f.read()[-3000:]}")
            try:
                with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=5) as r:
                    targets = json.load(r)["data"]["activeTargets"]
                health = {t["scrapeUrl"]: t["health"] for t in targets}
                if len(health) == 4 and all(h == "up" for h in health.values()):
                    print(f"  every target up: {', '.join(sorted(health))}", flush=True)
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        raise Failed(f"prometheus did not scrape the four processes within 120 s: {health}")
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def path_after_export(env, line):
    """PATH after the quickstart's `export PATH=...` line, as a shell sets it."""
    p = subprocess.run(["bash", "-c", line + ' && printf %s "$PATH"'], env=env,
                       stdout=subprocess.PIPE, check=True)
    return p.stdout.decode()


def scenario(runner, commands):
    def take(command):
        if command not in commands:
            raise Failed(f"README no longer holds the command `{command}`; "
                         "tests/readme/readme_commands_test.py must follow it")
        return command

    def starting(prefix):
        found = [c for c in commands if c.startswith(prefix)]
        if not found:
            raise Failed(f"README holds no command starting `{prefix}`")
        return found

    # Quick start: the one command, then the PATH line it prints.
    out, _ = runner.run(take("deploy/quickstart.sh"))
    need("the quickstart showed no GET of its PUT", "hello from rkv" in out, out)
    need("the quickstart started no rkv-gateway on 6380 and 11212",
         "rkv-gateway redis listening on 127.0.0.1:6380" in out
         and "rkv-gateway memcached listening on 127.0.0.1:11212" in out, out)
    need("the quickstart showed no GET through redis-cli",
         "$ redis-cli -p 6380 GET greeting\nhello from rkv" in out, out)
    need("the quickstart printed no redis-cli line to try", "       redis-cli -p 6380 GET greeting" in out, out)
    exports = [l for l in out.splitlines() if l.startswith("export PATH=")]
    need("the quickstart printed no `export PATH=` line for a prefix not on PATH", len(exports) == 1, out)
    print(f"$ {exports[0]}", flush=True)
    runner.env["PATH"] = path_after_export(runner.env, exports[0])
    which = shutil.which("kvctl", path=runner.env["PATH"])
    need("kvctl is not on PATH after the quickstart's line", which is not None, runner.env["PATH"])
    need(f"the kvctl found ({which}) is not the one the quickstart installed",
         which.startswith(runner.env["HOME"]), which)

    # Using kvctl, against the quickstart's server.
    local = starting("kvctl --server=127.0.0.1:7700 --token_file=.rkv-local/token ")
    for command in local:
        out, _ = runner.run(command)
        verb = command.split()[3]
        if verb == "put":
            need("put printed no bare version into a pipe", re.fullmatch(r"[0-9]+\n?", out), out)
        elif verb == "get":
            need("get did not print the value alone", out == "hello", out)
    runner.run(take("kvctl --help"))

    # The Python example, against the same server.
    python = starting(PYTHON_EXAMPLE_START)
    need("README holds more than one Python example", len(python) == 1, "\n".join(python))
    out, _ = runner.run(python[0])
    need("the Python example did not print its GET and MultiGet",
         "b'hello'" in out and "[b'hello', None]" in out, out)

    # The quickstart's rkv-gateway on the same server: its memcached lines.
    def memcached_lines():
        out, _ = runner.run(starting("bash -c 'exec 3<>/dev/tcp/127.0.0.1/11212;")[0])
        need("the memcached session did not store and get mc-greeting",
             out == "STORED\r\nVALUE mc-greeting 0 5\r\nhello\r\nEND\r\n", out)
        out, _ = runner.run(take("memccat --servers=127.0.0.1:11212 mc-greeting"))
        need("memccat did not print the value", out.strip() == "hello", out)
        out, _ = runner.run(take("memcstat --servers=127.0.0.1:11212"))
        need("memcstat showed no cmd_get", "cmd_get" in out, out)
    # Its Redis lines, with what the README says each prints.
    def redis_lines():
        expected = {
            "redis-cli -p 6380 SET greeting hello": "OK",
            "redis-cli -p 6380 GET greeting": "hello",
            "redis-cli -p 6380 INCR visits": "1",
            "redis-cli -p 6380 SET session:1 alice EX 60": "OK",
            "redis-cli -p 6380 MGET greeting visits absent": "hello\n1\n",
        }
        for command in starting("redis-cli -p 6380 "):
            out, _ = runner.run(command)
            if command.endswith("TTL session:1"):
                need("TTL after EX 60 is not 50 to 60", out.strip().isdigit() and 50 <= int(out) <= 60, out)
            else:
                need(f"`{command}` did not print {expected[command]!r}", out.rstrip("\n") == expected[command].rstrip("\n"),
                     out)
        out, _ = runner.run(starting("redis-benchmark -p 6380 ")[0])
        for test in ("SET", "GET", "INCR"):
            need(f"redis-benchmark printed no {test} result", re.search(rf"(^|\r|\n){test}: [0-9.]+ requests per second", out),
                 out)

    memcached_lines()
    redis_lines()

    # A local cluster, its kvctl lines and its metrics.
    runner.run(take("deploy/cluster.sh start"))
    out, _ = runner.run(take("kvctl --coordinator=127.0.0.1:7600 --token_file=.rkv-cluster/token members"))
    need("members did not list three UP servers", out.count(" UP") >= 3, out)
    for command in starting("kvctl --coordinator=127.0.0.1:7600 --token_file=.rkv-cluster/token "):
        if command in runner.ran or " --tls_ca=" in command:
            continue
        out, _ = runner.run(command)
        if command.endswith(" where greeting"):
            need("where named no server", "s-" in out, out)
    for command in starting("curl -s http://127.0.0.1:8701/metrics"):
        out, _ = runner.run(command)
        if "promtool" not in command:
            need("the server's metrics lack its keys", "rkv_server_keys" in out, out)
    prometheus_scrapes_everything(runner, starting("prometheus --config.file=")[0])
    runner.run(take("deploy/cluster.sh stop"))
    # "stop and remove .rkv-cluster/ to change kinds"
    print("$ rm -rf .rkv-cluster", flush=True)
    shutil.rmtree(os.path.join(runner.root, ".rkv-cluster"))

    # Several coordinators on etcd.
    ha = "kvctl --coordinator=127.0.0.1:7600,127.0.0.1:7601,127.0.0.1:7602 --token_file=.rkv-cluster/token "
    runner.run(take("deploy/cluster.sh start --ha"))
    runner.run(take(ha + "put KEY VALUE"))
    out, _ = runner.run(take(ha + "get KEY"))
    need("get KEY did not print VALUE", out == "VALUE", out)
    out, _ = runner.run(take(ha + "coordinators"))
    need("coordinators named no leader", "leader" in out, out)
    out, _ = runner.run(take("deploy/cluster.sh status       # etcd's health and which coordinator leads"))
    runner.run(take("deploy/cluster.sh stop         # servers, then coordinators, then etcd"))
    print("$ rm -rf .rkv-cluster", flush=True)
    shutil.rmtree(os.path.join(runner.root, ".rkv-cluster"))

    # TLS on the control plane: its kvctl lines with the CA, and without it
    # the error the README quotes.
    tls = "kvctl --coordinator=127.0.0.1:7600 --token_file=.rkv-cluster/token --tls_ca=.rkv-cluster/tls/ca.crt "
    runner.run(take("deploy/cluster.sh start --tls"))
    runner.run(take(tls + "put secret VALUE"))
    out, _ = runner.run(take(tls + "get secret"))
    need("get secret did not print VALUE", out == "VALUE", out)
    out, _ = runner.run(take(tls + "verify"))
    need("verify did not find every shard in agreement", "agree" in out, out)
    plain = subprocess.run(["kvctl", "--coordinator=127.0.0.1:7600", "--token_file=.rkv-cluster/token",
                            "--timeout=3000", "get", "secret"], cwd=runner.root, env=runner.env,
                           capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    need("kvctl without --tls_ca did not fail saying TLS",
         plain.returncode != 0 and "TLS required?" in plain.stderr, plain.stderr)
    runner.run(take("deploy/cluster.sh stop"))


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(sys.argv[1])
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        commands = readme_commands(f.read())

    reasons = busy_reasons(root)
    if reasons:
        for r in reasons:
            print(f"readme_commands_test: {r}")
        if os.environ.get("RKV_NO_SKIP") == "1":
            print("readme_commands_test: FAILED: cannot run here, and RKV_NO_SKIP=1 says every test must run")
            return 1
        return SKIP

    home = tempfile.mkdtemp(prefix="rkv-readme-home-")
    env = dict(os.environ)
    env["HOME"] = home
    env.pop("SUDO_USER", None)  # the quickstart as its user runs it: the prefix under $HOME
    runner = Runner(root, env, home)
    failure = None
    try:
        scenario(runner, commands)
        unaccounted = [c for c in commands if c not in runner.ran and c not in NOT_RUN]
        if unaccounted:
            raise Failed("README commands neither run nor listed in NOT_RUN:\n  " + "\n  ".join(unaccounted))
        stale = [c for c in NOT_RUN if c not in commands]
        if stale:
            raise Failed("NOT_RUN names commands the README no longer holds:\n  " + "\n  ".join(stale))
    except (Failed, subprocess.TimeoutExpired) as e:
        failure = e
    finally:
        for command in ("deploy/cluster.sh stop", "deploy/quickstart.sh stop"):
            subprocess.run(["bash", "-c", command], cwd=root, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        for d in (".rkv-local", ".rkv-cluster"):
            shutil.rmtree(os.path.join(root, d), ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    if failure is not None:
        print(f"readme_commands_test: FAILED: {failure}")
        return 1
    print(f"readme_commands_test: passed: {len(runner.ran)} README commands run as pasted, "
          f"{len(NOT_RUN)} not run (each for its reason)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
