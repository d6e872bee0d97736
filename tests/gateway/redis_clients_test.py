#!/usr/bin/env python3
"""Real Redis clients against rkv-gateway on a real rkv-server.

Usage: redis_clients_test.py CLIENT RKV_GATEWAY RKV_SERVER

CLIENT is one of
  redis_cli        redis-cli (redis-tools): PING, SET/GET, INCR,
                   EXPIRE/TTL, MGET, errors, commands read from stdin;
  redis_benchmark  redis-benchmark -t set,get,incr,mset -P 16 -n 20000 -q:
                   every test ran with no error, the gateway logged none,
                   and the values are right afterwards (the INCR counter
                   is exactly 20000: no increment lost or applied twice);
  python_redis     Debian's python3-redis: SET/GET, several connections
                   doing compare-and-set INCRs at once with no increment
                   lost, pipelines, TTLs and a key that expires;
  ioredis          Node.js's ioredis (tests/gateway/node/ioredis_test.js,
                   its modules installed there by
                   deploy/install-node-modules.sh).

Exits 77 (ctest's skip) when the client is not installed, unless
RKV_NO_SKIP=1, where a missing client fails like any other failure.
"""

import os
import re
import shutil
import subprocess
import sys
import threading
import time

from gateway_processes import WAIT_S, Failed, main, skip

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(HERE, "node")


def check(what, got, want):
    if got != want:
        raise Failed(f"{what}: got {got!r}, want {want!r}")


def redis_cli(procs, *args, stdin=None):
    r = subprocess.run(["redis-cli", "-h", procs.host, "-p", str(procs.port), *args], input=stdin,
                       capture_output=True, text=True, timeout=WAIT_S)
    if r.returncode != 0:
        raise Failed(f"redis-cli {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r.stdout


def run_redis_cli(procs):
    if shutil.which("redis-cli") is None:
        skip("redis-cli is not installed (Debian: redis-tools)")
    cli = lambda *a: redis_cli(procs, *a).rstrip("\n")
    check("PING", cli("PING"), "PONG")
    check("SET", cli("SET", "cli:k", "hello world"), "OK")
    check("GET", cli("GET", "cli:k"), "hello world")
    check("INCR", [cli("INCR", "cli:n") for _ in range(3)], ["1", "2", "3"])
    check("EXPIRE", cli("EXPIRE", "cli:k", "100"), "1")
    ttl = int(cli("TTL", "cli:k"))
    if not 90 < ttl <= 100:
        raise Failed(f"TTL after EXPIRE 100: {ttl}")
    check("TTL of a missing key", cli("TTL", "cli:none"), "-2")
    check("MGET", cli("MGET", "cli:k", "cli:none", "cli:n"), "hello world\n\n3")
    check("unknown command", cli("LPUSH", "cli:l", "x"),
          "ERR unknown command 'LPUSH', with args beginning with: 'cli:l' 'x' ")
    check("INCR of a string", cli("INCR", "cli:k"), "ERR value is not an integer or out of range")
    check("wrong arity", cli("GET"), "ERR wrong number of arguments for 'get' command")
    check("KEYS", cli("KEYS", "*").startswith("ERR rkv-gateway does not support keyspace scans"), True)
    # Commands read from stdin, one a line, as a script would feed them.
    out = redis_cli(procs, stdin="SET cli:s 1\nINCRBY cli:s 41\nGET cli:s\nDEL cli:s cli:none\n")
    check("commands from stdin", out.split("\n")[:4], ["OK", "42", "42", "1"])
    print("redis-cli: every check held")


def run_redis_benchmark(procs):
    if shutil.which("redis-benchmark") is None:
        skip("redis-benchmark is not installed (Debian: redis-tools)")
    n = 20000
    r = subprocess.run(["redis-benchmark", "-h", procs.host, "-p", str(procs.port), "-t", "set,get,incr,mset",
                        "-P", "16", "-n", str(n), "-q"], capture_output=True, text=True, timeout=600)
    # -q rewrites one progress line with \r; the results end with a newline.
    out = r.stdout.replace("\r", "\n")
    print(out.strip().split("\n")[-4:] if out.strip() else "(no output)")
    if r.returncode != 0:
        raise Failed(f"redis-benchmark exited {r.returncode}: {r.stderr}")
    for line in out.split("\n") + r.stderr.split("\n"):
        if "rror" in line or "ERR" in line:
            raise Failed(f"redis-benchmark reported an error: {line}")
    for test in ("SET", "GET", "INCR", "MSET (10 keys)"):
        if not re.search(rf"^{re.escape(test)}: [0-9.]+ requests per second", out, re.M):
            raise Failed(f"redis-benchmark printed no result for {test}:\n{out}")
    # Without -r every command uses one key: the counter counts every INCR.
    check("the INCR counter", redis_cli(procs, "GET", "counter:__rand_int__").strip(), str(n))
    check("the SET value", redis_cli(procs, "STRLEN", "key:__rand_int__").strip(), "3")
    stats = redis_cli(procs, "INFO", "stats")
    check("rkv_backend_errors", re.search(r"rkv_backend_errors:(\d+)", stats).group(1), "0")
    errors = procs.gateway_errors()
    if errors:
        raise Failed("the gateway logged errors:\n" + "".join(errors))
    print("redis-benchmark: every test ran, no error, the values are right")


def run_python_redis(procs):
    try:
        import redis
    except ImportError:
        skip("the Python module redis is not installed (Debian: python3-redis)")
    r = redis.Redis(host=procs.host, port=procs.port)
    check("PING", r.ping(), True)
    check("SET", r.set("py:k", b"\x00binary\r\n"), True)
    check("GET", r.get("py:k"), b"\x00binary\r\n")
    check("GET of a missing key", r.get("py:none"), None)
    # Compare-and-set increments from several connections at once.
    threads, each = 8, 150
    failures = []

    def work():
        c = redis.Redis(host=procs.host, port=procs.port)
        try:
            for _ in range(each):
                c.incr("py:counter")
        except Exception as e:  # reported below, with the others
            failures.append(repr(e))
        finally:
            c.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if failures:
        raise Failed(f"INCR failed: {failures[:3]}")
    check("the counter after concurrent INCRs", r.get("py:counter"), str(threads * each).encode())
    pipe = r.pipeline(transaction=False)
    pipe.set("py:a", "1").incrby("py:a", 9).get("py:a").mget("py:a", "py:none")
    check("pipeline", pipe.execute(), [True, 10, b"10", [b"10", None]])
    try:
        r.execute_command("HSET", "py:h", "f", "v")
        raise Failed("HSET did not fail")
    except redis.ResponseError as e:
        check("unknown command error", str(e).startswith("unknown command 'HSET'"), True)
    # Expiry.
    check("SET EX", r.set("py:t", "v", ex=100), True)
    ttl = r.ttl("py:t")
    if not 90 < ttl <= 100:
        raise Failed(f"TTL after SET EX 100: {ttl}")
    check("PERSIST", r.persist("py:t"), True)
    check("TTL after PERSIST", r.ttl("py:t"), -1)
    check("SET PX", r.set("py:short", "v", px=200), True)
    deadline = time.monotonic() + WAIT_S
    while r.get("py:short") is not None:
        if time.monotonic() > deadline:
            raise Failed("a key SET with PX 200 did not expire")
        time.sleep(0.05)
    check("TTL of an expired key", r.ttl("py:short"), -2)
    check("DEL", r.delete("py:k", "py:a", "py:none"), 2)
    r.close()
    print("python3-redis: every check held")


def run_ioredis(procs):
    if shutil.which("node") is None:
        skip("node is not installed (Debian: nodejs)")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "ioredis")):
        skip(f"the npm package ioredis is not installed in {NODE_DIR} (deploy/install-node-modules.sh)")
    r = subprocess.run(["node", os.path.join(NODE_DIR, "ioredis_test.js"), procs.host, str(procs.port)],
                       capture_output=True, text=True, timeout=WAIT_S, cwd=NODE_DIR)
    print(r.stdout.strip())
    if r.returncode != 0:
        raise Failed(f"ioredis_test.js exited {r.returncode}:\n{r.stdout}\n{r.stderr}")


CLIENTS = {
    "redis_cli": run_redis_cli,
    "redis_benchmark": run_redis_benchmark,
    "python_redis": run_python_redis,
    "ioredis": run_ioredis,
}


if __name__ == "__main__":
    sys.exit(main(__doc__, CLIENTS, "redis", ["--redis_listen=127.0.0.1:0", "--memcached_listen=", "--threads=2"]))
