#!/usr/bin/env python3
"""A real Prometheus scrapes a running rkv cluster.

Starts rkv-coordinator and one rkv-server on loopback, each with
--metrics_listen, then Debian's `prometheus` with a scrape config naming
both (every second), and asks its query API what operators ask it: `up`
for both jobs, the coordinator's map version and members, the server's
keys, and the put counter after `kvctl put` (a value that follows the
cluster, not only a series that exists). Every process is stopped at the
end, also on a failure, whose message names what was missing and ends
with the processes' log tails.

Exit status: 0 when every query answered as expected; 1 when one did not;
77 (ctest's skip) when prometheus is not on PATH, unless RKV_NO_SKIP=1
says every test must run here (then 1).

Usage: prometheus_scrape_test.py RKV_COORDINATOR RKV_SERVER KVCTL
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SKIP = 77
# Generous: bounds a hang on a loaded machine; nothing waits for it to pass.
WAIT_S = 120


class Failed(Exception):
    pass


def free_port():
    """A port the system picked for a socket closed at once: free for the
    next process to bind, barring a race that the start check reports."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, procs):
    """Calls check() until it returns a true value (returned) or WAIT_S pass."""
    deadline = time.monotonic() + WAIT_S
    last = None
    while time.monotonic() < deadline:
        for name, p in procs:
            if p.poll() is not None:
                raise Failed(f"{name} exited with status {p.returncode} while waiting for {what}")
        try:
            got = check()
            if got:
                return got
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.2)
    raise Failed(f"no {what} within {WAIT_S} s" + (f" (last error: {last})" if last else ""))


def metrics_address(log_path):
    """HOST:PORT of the 'metrics on http://HOST:PORT/metrics' line, or None."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    at = text.rfind("metrics on http://")
    if at < 0:
        return None
    start = at + len("metrics on http://")
    end = text.find("/metrics", start)
    return text[start:end] if end > 0 else None


def listening_address(out_path, program):
    with open(out_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(f"{program} listening on "):
                return line.split()[3]
    return None


def query(prometheus, expr):
    """The result vector of an instant query: [(labels, value)]."""
    url = f"http://{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise ValueError(f"query {expr!r}: {body}")
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def tail(path, lines=15):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"({e})"


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    coordinator_bin, server_bin, kvctl_bin = (os.path.abspath(p) for p in argv[1:])
    prometheus_bin = shutil.which("prometheus")
    if prometheus_bin is None:
        why = "prometheus is not on PATH (Debian: apt-get install prometheus)"
        if os.environ.get("RKV_NO_SKIP") == "1":
            print(f"prometheus_scrape_test: FAILED: {why}, and RKV_NO_SKIP=1 says every test must run here")
            return 1
        print(f"prometheus_scrape_test: skipped: {why}")
        return SKIP

    work = tempfile.mkdtemp(prefix="rkv_prometheus_")
    token = os.path.join(work, "token")
    with open(token, "w", encoding="utf-8") as f:
        f.write("rkv-prometheus-scrape-token\n")
    procs = []
    logs = {}

    def start(name, args):
        out = os.path.join(work, name + ".out")
        err = os.path.join(work, name + ".log")
        logs[name] = (out, err)
        with open(out, "w") as o, open(err, "w") as e:
            procs.append((name, subprocess.Popen(args, stdout=o, stderr=e, cwd=work)))

    try:
        start("rkv-coordinator", [coordinator_bin, "--data_dir=" + os.path.join(work, "coordinator"),
                                  "--token_file=" + token, "--listen=127.0.0.1:0", "--servers=1", "--shards=16",
                                  "--metrics_listen=127.0.0.1:0"])
        coordinator = wait_for("coordinator address",
                               lambda: listening_address(logs["rkv-coordinator"][0], "rkv-coordinator"), procs)
        coordinator_metrics = wait_for("coordinator metrics line",
                                       lambda: metrics_address(logs["rkv-coordinator"][1]), procs)
        start("rkv-server", [server_bin, "--coordinator=" + coordinator,
                             "--data_dir=" + os.path.join(work, "server"), "--token_file=" + token,
                             "--listen=127.0.0.1:0", "--admin_listen=127.0.0.1:0", "--transport=tcp",
                             "--memory=16M", "--max_keys=1024", "--metrics_listen=127.0.0.1:0"])
        server_metrics = wait_for("server metrics line", lambda: metrics_address(logs["rkv-server"][1]), procs)

        prometheus = f"127.0.0.1:{free_port()}"
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                    f"  - job_name: rkv-coordinator\n    static_configs:\n"
                    f"      - targets: [\"{coordinator_metrics}\"]\n"
                    f"  - job_name: rkv-server\n    static_configs:\n"
                    f"      - targets: [\"{server_metrics}\"]\n")
        start("prometheus", [prometheus_bin, "--config.file=" + config,
                             "--storage.tsdb.path=" + os.path.join(work, "tsdb"),
                             "--web.listen-address=" + prometheus, "--log.level=warn"])

        def ready():
            with urllib.request.urlopen(f"http://{prometheus}/-/ready", timeout=2) as r:
                return r.status == 200
        wait_for("Prometheus ready", ready, procs)

        def both_up():
            up = {m["job"]: v for m, v in query(prometheus, "up")}
            return up.get("rkv-coordinator") == 1 and up.get("rkv-server") == 1
        wait_for("up == 1 for both jobs", both_up, procs)

        def coordinator_series():
            version = query(prometheus, "rkv_coordinator_map_version")
            members = query(prometheus, 'rkv_coordinator_members{state="up"}')
            return version and version[0][1] >= 1 and members and members[0][1] == 1
        wait_for("the coordinator's map version and one member up", coordinator_series, procs)

        # A PUT through the cluster: the scraped counter follows it.
        put = subprocess.run([kvctl_bin, "--coordinator=" + coordinator, "--token_file=" + token,
                              "put", "scraped-key", "scraped-value"],
                             capture_output=True, text=True, timeout=WAIT_S)
        if put.returncode != 0:
            raise Failed(f"kvctl put exited {put.returncode}: {put.stdout}{put.stderr}")

        def put_counted():
            puts = query(prometheus, 'rkv_server_operations_total{op="put"}')
            keys = query(prometheus, "rkv_server_keys")
            return puts and puts[0][1] >= 1 and keys and keys[0][1] >= 1
        wait_for("the server's put counter and keys after the PUT", put_counted, procs)

        def apply_histogram():
            count = query(prometheus, 'rkv_server_apply_seconds_count{from="client"}')
            return count and count[0][1] >= 1
        wait_for("the apply-latency histogram's count after the PUT", apply_histogram, procs)
        print("prometheus_scrape_test: Prometheus scraped both processes; up, map version, members, "
              "keys, puts and the apply histogram answered as expected")
        return 0
    except (Failed, subprocess.TimeoutExpired) as e:
        print(f"prometheus_scrape_test: FAILED: {e}")
        for name, (out, err) in logs.items():
            print(f"--- {name} (last lines)\n{tail(out)}{tail(err)}")
        return 1
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
