#!/usr/bin/env python3
"""The report of bench/compare: markdown, charts (gnuplot) and the raw .json.

Usage: report.py --work=DIR --out=FILE.md
       report.py --from_json=FILE.json --out=FILE.md

--work reads what bench/compare left in its temporary folder (info.tsv,
stores.tsv, runs.tsv and runs/<id>.json, runs/<id>.log; with --verbs also
perftest.txt, deploy/softroce/perftest.sh's figures of the guest's RDMA
device), writes every figure and command to FILE.json, then the report and
its charts
(FILE-throughput.png, FILE-latency.png, FILE-cpu.png). --from_json writes
the report and charts again from such a .json. Python's standard library
only; the charts need gnuplot, and without it the report says so.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

# The known causes of each kind of loss, in the file beside this one.
from reasons import REASONS

WORKLOADS = {
    "a": "A: 50% read, 50% update",
    "b": "B: 95% read, 5% update",
    "c": "C: 100% read",
    "d": "D: 95% read, 5% insert, latest keys",
    "f": "F: 50% read, 50% read-modify-write",
}
KINDS = ("get", "put", "insert", "rmw")
KIND_NAMES = {"get": "GET", "put": "PUT", "insert": "INSERT", "rmw": "RMW"}

STORES = {
    "rkv-wal": ("a process crash (WAL, no fsync)", True),
    "rkv-none": ("a clean shutdown only", True),
    "rkv-r2": ("the loss of one server (two copies)", True),
    "memcached": ("nothing (memory only)", False),
    "redis": ("nothing (memory only)", False),
    "redis-aof": ("a process crash (AOF, fsync every second)", False),
    "redis-wait1": ("the loss of one server (a replica, WAIT 1)", False),
}
# Each rkv store's like-for-like peers: those that promise as much of an
# acknowledged write.
PEERS = {
    "rkv-none": ["memcached", "redis"],
    "rkv-wal": ["redis-aof"],
    "rkv-r2": ["redis-wait1"],
}


def read_tsv(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def collect(work):
    """Everything bench/compare measured, from its temporary folder."""
    info = {k: v for k, v in read_tsv(os.path.join(work, "info.tsv"))}
    stores = {}
    for store, started in read_tsv(os.path.join(work, "stores.tsv")):
        stores.setdefault(store, []).append(started)
    runs = []
    for row in read_tsv(os.path.join(work, "runs.tsv")):
        # A run of before --rounds has no round: its one round is 1.
        run_id, store, step, threads, rc, ticks, wall, command = row[:8]
        run = {
            "id": run_id,
            "store": store,
            "step": step,
            "threads": int(threads),
            "rc": int(rc),
            "cpu_ticks": int(ticks),
            "wall_s": int(wall),
            "command": command,
            "round": int(row[8]) if len(row) > 8 else 1,
            "result": None,
            "log_tail": "",
        }
        result = os.path.join(work, "runs", run_id + ".json")
        if os.path.exists(result):
            with open(result, encoding="utf-8") as f:
                text = f.read().strip()
            if text:
                run["result"] = json.loads(text.splitlines()[-1])
        log = os.path.join(work, "runs", run_id + ".log")
        if run["rc"] != 0 and os.path.exists(log):
            with open(log, encoding="utf-8", errors="replace") as f:
                run["log_tail"] = "".join(f.readlines()[-8:])
        runs.append(run)
    data = {"info": info, "stores": stores, "runs": runs}
    perftest = os.path.join(work, "perftest.txt")
    if os.path.exists(perftest):
        data["perftest"] = read_perftest(perftest)
    return data


def read_perftest(path):
    """deploy/softroce/perftest.sh's lines: test size typical_us p99_us
    msg_per_s MB_per_s ("-" where a figure does not apply)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) != 6 or line.startswith("#"):
                continue
            row = {"test": fields[0], "size": int(fields[1])}
            for name, v in zip(("typical_us", "p99_us", "msg_per_s", "MB_per_s"), fields[2:]):
                row[name] = None if v == "-" else float(v)
            rows.append(row)
    return rows


class Figures:
    """The timed runs, indexed by (store, workload, threads)."""

    def __init__(self, data):
        self.info = data["info"]
        self.stores_started = data["stores"]
        self.runs = data["runs"]
        self.stores = self.info["stores"].split()
        self.workloads = self.info["workloads"].split()
        self.threads = [int(t) for t in self.info["threads"].split()]
        self.clk_tck = int(self.info["clk_tck"])
        self.verbs = self.info.get("transport") == "verbs"
        self.perftest = data.get("perftest", [])
        self.rounds = int(self.info.get("rounds", "1"))
        # Each cell's runs, one a round, in the order of the rounds.
        self.cells = {}
        for run in self.runs:
            if run["step"] != "load":
                self.cells.setdefault((run["store"], run["step"], run["threads"]), []).append(run)
        for runs in self.cells.values():
            runs.sort(key=lambda r: r.get("round", 1))

    def run(self, store, w, t):
        """The cell's first run (its command stands for every round's)."""
        runs = self.cells.get((store, w, t))
        return runs[0] if runs else None

    def cell_runs(self, store, w, t):
        return self.cells.get((store, w, t), [])

    def over_rounds(self, store, w, t, figure, rnd=None):
        """The median over the cell's rounds of figure(run), leaving out
        the runs without it; with rnd, that round's figure alone."""
        values = []
        for r in self.cell_runs(store, w, t):
            if rnd is not None and r.get("round", 1) != rnd:
                continue
            v = figure(r) if r["result"] else None
            if v is not None:
                values.append(v)
        return median(values)

    def ops(self, store, w, t, rnd=None):
        return self.over_rounds(store, w, t, lambda r: float(r["result"]["ops_per_s"]), rnd)

    def latency(self, store, w, t, kind, pct):
        def figure(r):
            k = r["result"].get("latency", {}).get(kind)
            if not k or not k.get("count"):
                return None
            return float(k[pct + "_us"])
        return self.over_rounds(store, w, t, figure)

    def cpu(self, store, w, t):
        """The store's CPU microseconds per operation of the run."""
        def figure(r):
            if not r["result"].get("ops"):
                return None
            return r["cpu_ticks"] * 1e6 / self.clk_tck / r["result"]["ops"]
        return self.over_rounds(store, w, t, figure)

    def round_ratios(self, store, w, t):
        """rkv's ops/s ÷ its best peer's within each round: [(round,
        ratio or None)]."""
        peers, _ = self.peers(store)
        out = []
        for rnd in range(1, self.rounds + 1):
            mine = self.ops(store, w, t, rnd)
            theirs = [v for v in (self.ops(p, w, t, rnd) for p in peers) if v]
            out.append((rnd, mine / max(theirs) if mine and theirs else None))
        return out

    def kinds(self, w):
        """The kinds of operation the runs of workload w did, in order."""
        seen = set()
        for (s, ww, t), runs in self.cells.items():
            for r in runs:
                if ww != w or not r["result"]:
                    continue
                for k, v in r["result"].get("latency", {}).items():
                    if v.get("count"):
                        seen.add(k)
        return [k for k in KINDS if k in seen]

    def rkv_stores(self):
        return [s for s in self.stores if STORES.get(s, ("", False))[1]]

    def peers(self, store):
        """(peers, like_for_like) of an rkv store among the stores that ran."""
        others = [s for s in self.stores if not STORES.get(s, ("", False))[1]]
        like = [p for p in PEERS.get(store, []) if p in others]
        return (like, True) if like else (others, False)

    def metrics(self, w):
        """(key, label, getter, higher_is_better) of every figure of workload w."""
        out = [("ops", "ops/s", lambda s, t: self.ops(s, w, t), True)]
        for k in self.kinds(w):
            for pct in ("p50", "p99"):
                out.append((k + "_" + pct, KIND_NAMES[k] + " " + pct,
                            (lambda kk, pp: lambda s, t: self.latency(s, w, t, kk, pp))(k, pct), False))
        out.append(("cpu", "store CPU µs/op", lambda s, t: self.cpu(s, w, t), False))
        return out

    def ratio(self, store, t, getter, higher):
        """(ratio, best peer, its value): above 1 when rkv does better."""
        mine = getter(store, t)
        peers, _ = self.peers(store)
        values = [(getter(p, t), p) for p in peers]
        values = [(v, p) for v, p in values if v is not None and v > 0]
        if mine is None or not values or mine <= 0:
            return None
        v, p = max(values) if higher else min(values)
        return (mine / v if higher else v / mine), p, v


def fmt_value(key, v):
    if v is None:
        return "-"
    if key == "ops":
        return "%d" % round(v)
    if v >= 1000:
        return "%.0f" % v
    return "%.1f" % v


def ratio_text(r):
    return ("%.3f×" if r < 0.1 else "%.2f×") % r


def fmt_ratio(r):
    if r is None:
        return ""
    text = ratio_text(r)
    return " (**%s**)" % text if r < 1 else " (%s)" % text


def bold_ratio(r):
    """A ratio alone, bold below 1 (a loss)."""
    return "**%s**" % ratio_text(r) if r < 1 else ratio_text(r)


def median(values):
    """The median of a list of numbers (the mean of the middle two for an
    even count); None for an empty list."""
    if not values:
        return None
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def loss_reasons(fig, store, w, t, key):
    """The keys of REASONS that explain a loss of rkv store in this cell."""
    verbs = fig.verbs
    get = "get_verbs" if verbs else "get"
    put = "put_verbs" if verbs else "put"
    write_path = [put] + {"rkv-wal": ["wal"], "rkv-r2": ["replication"]}.get(store, [])
    if key == "cpu":
        reasons = ["spin_verbs" if verbs else "spin"]
    elif key.startswith("get_"):
        reasons = [get]
    elif key.startswith("put_") or key.startswith("insert_"):
        reasons = write_path
    elif key.startswith("rmw_"):
        reasons = ["rmw", get] + write_path
    else:  # ops/s: the workload's mix
        reasons = {"a": [get] + write_path, "b": [get], "c": [get], "d": [get],
                   "f": [get, "rmw"] + write_path}.get(w, [get])
    # Runnable at once: each client thread and its connection's reader
    # thread, and at least one polling thread of the server.
    cpus = int(fig.info.get("cpus", "1"))
    if verbs and (store == "rkv-r2" or 2 * t + 1 > cpus):
        reasons.append("cpus_verbs")
    elif key != "cpu" and (store == "rkv-r2" or 2 * t + 1 > cpus):
        reasons.append("cpus")
    return reasons


def losses(fig):
    out = []
    for store in fig.rkv_stores():
        for w in fig.workloads:
            for t in fig.threads:
                for key, label, getter, higher in fig.metrics(w):
                    r = fig.ratio(store, t, getter, higher)
                    if r and r[0] < 1:
                        out.append({
                            "store": store, "workload": w, "threads": t, "key": key, "label": label,
                            "value": getter(store, t), "peer": r[1], "peer_value": r[2], "ratio": r[0],
                            "reasons": loss_reasons(fig, store, w, t, key),
                        })
    return out


def headline(fig):
    """Per rkv store and thread count: the geometric mean over the workloads
    of its ops/s ratio, and how many of its cells are below 1."""
    rows = []
    lost = losses(fig)
    for store in fig.rkv_stores():
        peers, like = fig.peers(store)
        per_threads = []
        for t in fig.threads:
            ratios = []
            for w in fig.workloads:
                r = fig.ratio(store, t, lambda s, tt, w=w: fig.ops(s, w, tt), True)
                ratios.append(r[0] if r else None)
            per_threads.append(geomean(ratios))
        cells = 0
        for w in fig.workloads:
            for t in fig.threads:
                for key, _, getter, higher in fig.metrics(w):
                    if fig.ratio(store, t, getter, higher):
                        cells += 1
        n_lost = sum(1 for x in lost if x["store"] == store)
        rows.append((store, peers, like, per_threads, n_lost, cells))
    return rows


def chart_data(fig):
    """The charts: (file suffix, title, panels); a panel is (title, ylabel,
    rows of (category, [value per store]))."""
    thr_rows, cpu_rows = [], []
    for w in fig.workloads:
        for t in fig.threads:
            cat = "%s/%dt" % (w.upper(), t)
            thr_rows.append((cat, [fig.ops(s, w, t) for s in fig.stores]))
            cpu_rows.append((cat, [fig.cpu(s, w, t) for s in fig.stores]))
    lat_panels = []
    for t in fig.threads:
        for pct in ("p50", "p99"):
            rows = []
            for w in fig.workloads:
                for k in fig.kinds(w):
                    rows.append(("%s:%s" % (w.upper(), KIND_NAMES[k]),
                                 [fig.latency(s, w, t, k, pct) for s in fig.stores]))
            lat_panels.append(("%s latency, %d client thread(s)" % (pct, t), "microseconds (log scale)", rows))
    params = "%s records of %s B, zipfian (D: latest), %s" % (
        fig.info["records"], fig.info["value_bytes"],
        "SoftRoCE guest (TCG): rkv over verbs, the peers over TCP" if fig.verbs else "loopback TCP")
    return [
        ("throughput", "Throughput per workload and client threads (" + params + ")",
         [("", "operations per second", thr_rows)]),
        ("latency", "Latency percentiles per workload and kind of operation (" + params + ")", lat_panels),
        ("cpu", "Store CPU time per operation, all its processes and threads (" + params + ")",
         [("", "microseconds per operation", cpu_rows)]),
    ]


COLOURS = {
    "rkv-wal": "#1f4e9e", "rkv-none": "#4a90d9", "rkv-r2": "#8fc1f0",
    "memcached": "#2e8b57", "redis": "#c0392b", "redis-aof": "#e67e22", "redis-wait1": "#f1c40f",
}


def gp_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def draw_charts(fig, base):
    """Draws the charts with gnuplot; returns ([(name, file)], problem)."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        shown = os.path.abspath(base + ".json")
        if shown.startswith(repo + os.sep):
            shown = os.path.relpath(shown, repo)
        return [], ("gnuplot not found: charts not drawn (deploy/install-deps.sh installs "
                    "gnuplot-nox; then `bench/compare --from_json=%s` draws them)" % shown)
    drawn = []
    with tempfile.TemporaryDirectory(prefix="rkv-compare-charts.") as tmp:
        for suffix, title, panels in chart_data(fig):
            png = "%s-%s.png" % (base, suffix)
            cols = 2 if len(panels) > 1 else 1
            rows = (len(panels) + cols - 1) // cols
            width, height = 1600, 520 * rows + 80
            lines = [
                'if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {',
                '  set terminal pngcairo size %d,%d noenhanced font "sans,10"' % (width, height),
                "} else {",
                "  set terminal png size %d,%d noenhanced" % (width, height),
                "}",
                "set output %s" % gp_string(os.path.abspath(png)),
                "set style data histograms",
                "set style histogram clustered gap 1",
                "set style fill solid 0.9 border -1",
                "set boxwidth 0.9",
                "set grid ytics",
                "set xtics nomirror",
                "set key top left",
            ]
            # Latency tails span three orders of magnitude: a log scale, from
            # 1 microsecond (a missing figure is written below it).
            log = suffix == "latency"
            lines += ["set logscale y", "set yrange [1:*]"] if log else ["set yrange [0:*]"]
            if len(panels) > 1:
                lines.append("set multiplot layout %d,%d title %s" % (rows, cols, gp_string(title)))
            for i, (ptitle, ylabel, data) in enumerate(panels):
                dat = os.path.join(tmp, "%s-%d.dat" % (suffix, i))
                with open(dat, "w", encoding="utf-8") as f:
                    f.write("# category " + " ".join(fig.stores) + "\n")
                    for cat, values in data:
                        f.write(cat + " " + " ".join("%.3f" % (v or (0.001 if log else 0)) for v in values) + "\n")
                lines.append("set title %s" % gp_string(ptitle if len(panels) > 1 else title))
                lines.append("set ylabel %s" % gp_string(ylabel))
                series = []
                for j, store in enumerate(fig.stores):
                    using = "%d:xtic(1)" % (j + 2) if j == 0 else "%d" % (j + 2)
                    series.append("%s using %s title %s lc rgb %s" % (
                        gp_string(dat) if j == 0 else '""', using, gp_string(store),
                        gp_string(COLOURS.get(store, "#777777"))))
                lines.append("plot " + ", \\\n     ".join(series))
            if len(panels) > 1:
                lines.append("unset multiplot")
            script = os.path.join(tmp, suffix + ".gp")
            with open(script, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            proc = subprocess.run([gnuplot, script], capture_output=True, text=True)
            if proc.returncode != 0 or not os.path.exists(png):
                return drawn, "gnuplot failed on the %s chart: %s" % (suffix, proc.stderr.strip()[-500:])
            drawn.append((suffix, os.path.basename(png)))
    return drawn, None


def render_perftest(fig, add):
    """The guest's RDMA device alone (deploy/softroce/perftest.sh), beside
    rkv's and its peers' 1-thread GET and PUT p50 in workload A and C."""
    add("## The device itself (perftest)")
    add("")
    if not fig.perftest:
        add("**No perftest figures came back (deploy/softroce/perftest.sh failed; see the runs that failed).**")
        add("")
        return
    add("`deploy/softroce/perftest.sh` in the same guest after the stores had stopped: perftest's")
    add("server and client on the same rxe device, pinned to the two vCPUs. ib_read_lat is one RDMA")
    add("READ's round trip, ib_send_lat half a SEND/RECV round trip (perftest's convention), ib_read_bw")
    add("many READs in flight on one queue pair. This is what the emulated device itself costs: the")
    add("floor under every rkv figure of this run.")
    add("")
    add("| test | bytes | typical µs | p99 µs | msg/s | MB/s |")
    add("|---|---:|---:|---:|---:|---:|")
    for r in fig.perftest:
        def f(v, fmt):
            return "-" if v is None else fmt % v
        add("| %s | %d | %s | %s | %s | %s |" % (r["test"], r["size"], f(r["typical_us"], "%.2f"),
                                                 f(r["p99_us"], "%.2f"), f(r["msg_per_s"], "%.0f"),
                                                 f(r["MB_per_s"], "%.2f")))
    add("")
    read_lat = [r["typical_us"] for r in fig.perftest if r["test"] == "ib_read_lat" and r["size"] == 1024]
    send_lat = [r["typical_us"] for r in fig.perftest if r["test"] == "ib_send_lat" and r["size"] == 1024]
    rows = []
    for s in fig.stores:
        for w, kind in (("c", "get"), ("a", "put")):
            if w in fig.workloads and 1 in fig.threads:
                v = fig.latency(s, w, 1, kind, "p50")
                if v is not None:
                    rows.append((s, w, kind, v))
    if rows and (read_lat or send_lat):
        add("Each store's 1-thread p50 of a GET (workload C) and of a PUT (workload A) against the")
        add("device's 1 KiB figures: a cached rkv GET is at least one READ (1 × ib_read_lat), an")
        add("uncached one two; an rkv PUT at least a round trip (2 × ib_send_lat) plus the server's")
        add("work; memcached's and Redis's figures set against the same device show what loopback")
        add("TCP costs in the same emulated kernel.")
        add("")
        add("| store | operation | p50 µs | ÷ ib_read_lat 1 KiB | ÷ (2 × ib_send_lat 1 KiB) |")
        add("|---|---|---:|---:|---:|")
        for s, w, kind, v in rows:
            a = "%.2f" % (v / read_lat[0]) if read_lat and read_lat[0] else "-"
            b = "%.2f" % (v / (2 * send_lat[0])) if send_lat and send_lat[0] else "-"
            add("| %s | %s (%s) | %.1f | %s | %s |" % (s, KIND_NAMES[kind], w.upper(), v, a, b))
        add("")


def render_rounds(fig, add):
    """Each rkv store's ops/s ratio to its best peer, round by round: both
    figures of a round come from runs minutes apart at most, so a ratio
    within a round is less at the mercy of the machine's phase than the
    ratio of two medians."""
    add("## Round by round")
    add("")
    add("Each rkv store's ops/s ÷ its best peer's ops/s within each round (the best peer of that")
    add("round), and the median and range of those ratios; the tables below give the medians of")
    add("each store's own figures instead.")
    add("")
    add("| rkv store | workload | threads | " + " | ".join("round %d" % r for r in range(1, fig.rounds + 1))
        + " | median | range |")
    add("|---|---|---:|" + "---:|" * (fig.rounds + 2))
    for store in fig.rkv_stores():
        if not fig.peers(store)[0]:
            continue
        for w in fig.workloads:
            for t in fig.threads:
                ratios = fig.round_ratios(store, w, t)
                known = [r for _, r in ratios if r]
                if not known:
                    continue
                add("| %s | %s | %d | %s | %s | %s |" % (
                    store, w.upper(), t, " | ".join(bold_ratio(r) if r else "-" for _, r in ratios),
                    bold_ratio(median(known)),
                    "%s to %s" % (ratio_text(min(known)), ratio_text(max(known)))))
    add("")


def write_lines(path, lines):
    """Writes the lines to path whole or not at all (a temporary file beside
    it, then a rename), so that a reader never sees half a report."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def render(data, out):
    fig = Figures(data)
    info = fig.info
    base = out[:-3] if out.endswith(".md") else out
    charts, chart_problem = draw_charts(fig, base)
    lost = losses(fig)
    failed = [r for r in fig.runs if r["rc"] != 0 or (r["step"] != "load" and not r["result"])]
    with_errors = [r for r in fig.runs if r["result"] and (r["result"].get("errors") or r["result"].get("unsent"))]
    secs = int(info.get("seconds", "0"))
    L = []
    add = L.append
    if fig.verbs:
        add("# rkv over SoftRoCE verbs beside memcached and Redis: YCSB in an emulated guest (%s)" % info["stamp"])
    else:
        add("# rkv beside memcached and Redis: YCSB over loopback TCP (%s)" % info["stamp"])
    add("")
    if fig.verbs:
        add("**These figures come from an emulated RDMA device (rxe, SoftRoCE) in a QEMU guest")
        add("without hardware acceleration (TCG): every program, the guest kernel and the device")
        add("itself run under CPU emulation, 10-50× slower than on the host, and the device's work is")
        add("software. No absolute figure here is a hardware figure. What the run shows is the ratio")
        add("between the stores, measured in the same guest in the same run, and the device's own cost")
        add("(perftest, below).**")
        add("")
    add("Produced by `%s` in %d min %02d s (rkv commit %s, binaries from `%s`)." % (
        info["invocation"], secs // 60, secs % 60, info["commit"], info["build_dir"]))
    if info.get("quick") == "1":
        add("")
        add("**A --quick run: a proof that the command works. Its figures mean nothing.**")
    add("")
    if fig.verbs:
        add("Guest: %s vCPU(s) (%s), Linux %s, %s on veth0 (link MTU %s, rxe active_mtu %s), guest CPU 0" % (
            info["cpus"], info.get("cpu_model") or "unknown CPU", info["kernel"], info.get("rdma_dev", "rxe0"),
            info.get("link_mtu", "?"), info.get("active_mtu", "?")))
        add("on a host CPU of its own (`run-in-guest.sh --pin-vcpu0`). Host: %s CPU(s), %s, Linux %s." % (
            info.get("host_cpus", "?"), info.get("host_cpu_model") or "unknown CPU", info.get("host_kernel", "?")))
        add("Host load average (1/5/15 min) before the run: %s; after: %s (the guest's vCPUs share the" % (
            info["load_start"], info["load_end"]))
        add("host's CPUs with whatever else runs there). Versions: %s, redis-server %s." % (
            info.get("memcached_version", "-"), info.get("redis_version", "-")))
    else:
        add("Machine: %s CPU(s), %s, Linux %s. Load average (1/5/15 min) before the run: %s; after: %s." % (
            info["cpus"], info.get("cpu_model") or "unknown CPU", info["kernel"], info["load_start"], info["load_end"]))
        add("The client and every store share these CPUs. Versions: %s, redis-server %s." % (
            info.get("memcached_version", "-"), info.get("redis_version", "-")))
        stress = int(info.get("stress_cpus", "0"))
        if stress > 0:
            add("")
            add("**%d CPU(s) busy:** `stress-ng --cpu %d` (%d CPU-bound worker(s)) ran from before the first" % (
                stress, stress, stress))
            add("store started to the end of the last run (`--stress_cpus=%d`), so every store and the client" % stress)
            add("had that much less CPU, as on a shared machine.")
            if info.get("stress_exited"):
                add("**stress-ng had exited before the run's end:** %s" % info["stress_exited"])
    add("")
    add("## Method")
    add("")
    if fig.verbs:
        add("Inside the guest, every store ran alone (started, measured, stopped before the next one")
        add("started). rkv-server listened with `--transport=verbs` on rxe0's address (%s) and the" % (
            info.get("rdma_addr", "?")))
        add("client used verbs too: a GET is one-sided READs of the server's memory, a PUT a WRITE and")
        add("a SEND (client and server on the same rxe device, rxe's loopback). memcached and Redis")
        add("listened on the guest's 127.0.0.1, over TCP through the same emulated kernel. Data dirs")
        add("lie on the guest's tmpfs, so rkv-wal's WAL and redis-aof's AOF are written to memory.")
        add("The same client, `rkv-ycsb`, drove every store with the same parameters: %s records of" % info["records"])
    else:
        add("Every store ran alone (started, measured, stopped before the next one started), on")
        add("127.0.0.1, driven by the same client, `rkv-ycsb`, with the same parameters: %s records of" % info["records"])
    add("%s bytes loaded once per store (not timed), then each workload with `--noload`, up to %s" % (
        info["value_bytes"], info["operations"]))
    add("operations or %s s, whichever came first, at %s client thread(s), one connection each." % (
        info["duration_s"], " and ".join(info["threads"].split())))
    if info.get("rkv_client") == "shared":
        add("rkv's threads shared one `rkv::Client` (`--rkv_client=shared`), as an application's threads")
        add("share theirs: a connection per thread, and one location cache, so that a key one thread")
        add("found or wrote is a cached location for every thread. Before 2026-12-07 each thread had")
        add("a Client of its own.")
    else:
        add("Each rkv thread had an `rkv::Client` of its own, with its own location cache.")
    add("Keys are zipfian (YCSB's scrambled zipfian, 0.99) except in D, which reads YCSB's latest")
    if fig.rounds > 1:
        add("distribution as YCSB defines it. %d rounds: in each, every store was started afresh, loaded" % fig.rounds)
        add("and ran every cell once, in an order turned by one store a round; every figure below is")
        add("the median of the rounds' figures of its cell (\"Round by round\" shows the spread).")
    else:
        add("distribution as YCSB defines it. One run per cell, no repeats: read small differences as noise.")
    add("Latencies are in microseconds, per kind of operation (GET, PUT, INSERT: D's new keys, RMW:")
    add("F's read-modify-write), from a log-linear histogram (< 0.4% error).")
    add("")
    add("\"store CPU µs/op\": the store's CPU time over the run (user + system, all threads of all")
    add("its processes, from `/proc/PID/stat`), divided by the run's operations. rkv's polling threads")
    add("spin while requests come and its client spins for replies; memcached and Redis sleep in epoll.")
    add("Read ops/s together with this column.")
    add("")
    add("In rkv's rows each figure is followed by its ratio to the best of that store's peers in the")
    add("same cell (the peers promise as much of an acknowledged write; see the table below):")
    add("ops/s rkv ÷ peer, latency and CPU peer ÷ rkv, so above 1 rkv does better and **below 1** it")
    add("loses. `$WORK` in a command is the run's temporary folder (removed at its end).")
    add("")
    add("## Stores")
    add("")
    add("| store | started as | an acknowledged write survives | compared with |")
    add("|---|---|---|---|")
    for s in fig.stores:
        started = "<br>".join("`%s`" % c for c in fig.stores_started.get(s, []))
        if s == "redis-wait1":
            started += "<br>every SET followed by `WAIT 1` (`--redis_wait_replicas=1`)"
        survives, is_rkv = STORES.get(s, ("?", False))
        if is_rkv:
            peers, like = fig.peers(s)
            compared = ", ".join(peers) + ("" if like else " (no like-for-like peer ran)")
        else:
            compared = "(peer)"
        add("| %s | %s | %s | %s |" % (s, started, survives, compared))
    add("")
    add("Records loaded with (per store, the same flags with that store's target):")
    loads = [r for r in fig.runs if r["step"] == "load"]
    if loads:
        add("`%s`" % loads[0]["command"])
    add("")
    add("## Headline")
    add("")
    head = headline(fig)
    add("| rkv store | compared with | " + " | ".join(
        "ops/s ratio, %d thread(s)" % t for t in fig.threads) + " | cells where rkv loses |")
    add("|---|---|" + "---:|" * len(fig.threads) + "---:|")
    for store, peers, like, per_threads, n_lost, cells in head:
        add("| %s | %s | %s | %d of %d |" % (
            store, "best of " + ", ".join(peers) if len(peers) > 1 else ", ".join(peers),
            " | ".join("%.2f×" % g if g else "-" for g in per_threads), n_lost, cells))
    add("")
    add("The ops/s ratio is the geometric mean over the workloads %s of rkv's ops/s ÷ the best" % (
        ", ".join(w.upper() for w in fig.workloads)))
    add("peer's; a cell is one figure of one workload and thread count (ops/s, a percentile, CPU).")
    add("")
    if fig.rounds > 1:
        render_rounds(fig, add)
    if fig.verbs:
        render_perftest(fig, add)
    add("## Charts")
    add("")
    if charts:
        names = {"throughput": "Throughput", "latency": "Latency percentiles", "cpu": "Store CPU per operation"}
        for suffix, png in charts:
            add("![%s](%s)" % (names.get(suffix, suffix), png))
            add("")
    if chart_problem:
        add("**Charts: %s.**" % chart_problem)
        add("")
    add("## Throughput (ops/s)")
    add("")
    add("| workload | threads | " + " | ".join(fig.stores) + " |")
    add("|---|---:|" + "---:|" * len(fig.stores))
    for w in fig.workloads:
        for t in fig.threads:
            cells = []
            for s in fig.stores:
                v = fig.ops(s, w, t)
                r = fig.ratio(s, t, lambda ss, tt, w=w: fig.ops(ss, w, tt), True) if s in fig.rkv_stores() else None
                cells.append(fmt_value("ops", v) + fmt_ratio(r[0] if r else None))
            add("| %s | %d | %s |" % (w.upper(), t, " | ".join(cells)))
    add("")
    for w in fig.workloads:
        metrics = fig.metrics(w)
        add("## Workload %s" % WORKLOADS.get(w, w))
        add("")
        add("| threads | store | " + " | ".join(m[1] for m in metrics) + " | errors | command |")
        add("|---:|---|" + "---:|" * len(metrics) + "---:|---|")
        for t in fig.threads:
            for s in fig.stores:
                run = fig.run(s, w, t)
                if run is None:
                    continue
                cells = []
                for key, label, getter, higher in metrics:
                    v = getter(s, t)
                    r = fig.ratio(s, t, getter, higher) if s in fig.rkv_stores() else None
                    cells.append(fmt_value(key, v) + fmt_ratio(r[0] if r else None))
                # Over every round of the cell.
                runs = fig.cell_runs(s, w, t)
                done = [r["result"] for r in runs if r["result"]]
                if done:
                    errors = str(sum(res.get("errors", 0) for res in done))
                    unsent = sum(res.get("unsent", 0) for res in done)
                    if unsent:
                        errors += " (%d unsent)" % unsent
                    for r in runs:
                        if r["rc"] != 0:
                            errors += ", exit %d" % r["rc"] + (" in round %d" % r.get("round", 1) if fig.rounds > 1 else "")
                else:
                    errors = "FAILED (exit %d)" % run["rc"]
                add("| %d | %s | %s | %s | `%s` |" % (t, s, " | ".join(cells), errors, run["command"]))
        add("")
    add("## Where rkv loses, and why")
    add("")
    if not lost:
        add("Nowhere in this run: every rkv figure is at least its best peer's.")
        add("")
    else:
        add("Every figure of this run where an rkv store's ratio to its best peer is below 1, by")
        add("store and kind of figure (the tables above show each cell in bold), with the known")
        add("causes of that kind of loss, numbered below. The causes are how rkv works; this run")
        add("did not measure how much of each loss each one explains.")
        add("")
        add("| rkv store | figure | cells lost | ratios | worst cell (rkv vs best peer) | causes |")
        add("|---|---|---:|---|---|---|")
        used = [k for k in REASONS if any(k in x["reasons"] for x in lost)]
        for store in fig.rkv_stores():
            mine = [x for x in lost if x["store"] == store]
            rank = ["ops/s"] + ["%s %s" % (KIND_NAMES[k], p) for k in KINDS for p in ("p50", "p99")]
            order = sorted({x["label"] for x in mine}, key=lambda lab: rank.index(lab) if lab in rank else len(rank))
            for label in order:
                group = sorted((x for x in mine if x["label"] == label), key=lambda x: x["ratio"])
                total = sum(1 for w in fig.workloads for t in fig.threads
                            for key, lab, getter, higher in fig.metrics(w)
                            if lab == label and fig.ratio(store, t, getter, higher))
                reasons = []
                for x in group:
                    for k in x["reasons"]:
                        if k not in reasons:
                            reasons.append(k)
                reasons.sort(key=list(REASONS).index)
                worst = group[0]
                ratios = ratio_text(worst["ratio"])
                if len(group) > 1:
                    ratios += " to " + ratio_text(group[-1]["ratio"])
                add("| %s | %s | %d of %d | %s | %s/%dt: %s vs %s %s | %s |" % (
                    store, label, len(group), total, ratios, worst["workload"].upper(), worst["threads"],
                    fmt_value(worst["key"], worst["value"]), worst["peer"],
                    fmt_value(worst["key"], worst["peer_value"]),
                    ", ".join("[%d]" % (used.index(k) + 1) for k in reasons)))
        add("")
        for i, k in enumerate(used):
            title, text = REASONS[k]
            add("%d. **%s.** %s" % (i + 1, title, text.format(cpus=info.get("cpus", "?"))))
        add("")
    wins = [(s, n) for s, _, _, _, n_lost, n in head for s, n in [(s, n - n_lost)] if n]
    if any(n for _, n in wins):
        add("Where rkv does better: " + "; ".join(
            "%s in %d cell(s)" % (s, n) for s, n in wins if n) + " (the ratios above 1 in the tables).")
        add("")
    if failed or with_errors:
        add("## Runs that failed or reported errors (their figures are not valid)")
        add("")
        for r in failed:
            add("- %s %s %d thread(s)%s: exit status %d, `%s`" % (
                r["store"], r["step"], r["threads"], " (round %d)" % r.get("round", 1) if fig.rounds > 1 else "", r["rc"],
                r["command"]))
            if r["log_tail"]:
                add("")
                add("```")
                add(r["log_tail"].rstrip())
                add("```")
        for r in with_errors:
            if r not in failed:
                add("- %s %s %d thread(s): %d errors, %d unsent" % (
                    r["store"], r["step"], r["threads"], r["result"].get("errors", 0), r["result"].get("unsent", 0)))
        add("")
    add("## What this is not")
    add("")
    if fig.verbs:
        add("Not hardware. rxe is RDMA done by the kernel's CPU, and here that CPU is emulated: a READ")
        add("that a NIC serves in a few microseconds without any CPU takes the tens of microseconds")
        add("perftest shows above, and TCP through the guest's loopback is emulated alike. The ratios")
        add("say how rkv's data path and its peers' compare when both pay for every instruction; they")
        add("are not a forecast of a machine with an RDMA NIC. Nor are they neutral: memcached and Redis")
        add("sleep in epoll between requests, and in this guest a wake-up is an emulated interrupt to a")
        add("halted vCPU, slow, where rkv's polling threads and its waiting client spin while requests")
        add("come and skip it (their cost shows in the CPU column instead). On a machine whose wake-ups")
        add("are quick the gap at one client thread narrows, as the host runs of `bench/compare` show.")
        add("rkv over tcp on the host is")
        add("`bench/compare` without --verbs; rkv's GET beside ib_read_lat, round by round, is")
        add("`bench/verbs.sh`.")
        write_lines(out, L)
        return chart_problem, bool(failed or with_errors)
    add("Loopback TCP is not RDMA. rkv's tcp transport is its fallback for machines without an")
    add("RDMA device, where the one-sided READs of a GET become request/response exchanges served")
    add("by the server's polling thread (docs/design.md §7.4). These figures compare the software")
    add("path on equal terms on one machine; rkv over verbs is measured by `bench/verbs.sh` in the")
    add("SoftRoCE guest, beside the same peers by `bench/compare --verbs`, and replication alone by")
    add("`bench/replication.sh`.")
    write_lines(out, L)
    return chart_problem, bool(failed or with_errors)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", help="bench/compare's temporary folder")
    parser.add_argument("--from_json", help="the .json of an earlier run")
    parser.add_argument("--out", required=True, help="the report (.md)")
    args = parser.parse_args()
    if bool(args.work) == bool(args.from_json):
        parser.error("give one of --work and --from_json")
    if args.work:
        data = collect(args.work)
        base = args.out[:-3] if args.out.endswith(".md") else args.out
        # One run a line: diffable, and small enough to keep beside the report.
        with open(base + ".json", "w", encoding="utf-8") as f:
            f.write('{"info": %s,\n "stores": %s,\n "runs": [\n' % (
                json.dumps(data["info"], ensure_ascii=False), json.dumps(data["stores"], ensure_ascii=False)))
            f.write(",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in data["runs"]))
            f.write("\n]")
            if "perftest" in data:
                f.write(',\n "perftest": %s' % json.dumps(data["perftest"], ensure_ascii=False))
            f.write("}\n")
    else:
        with open(args.from_json, encoding="utf-8") as f:
            data = json.load(f)
    chart_problem, _ = render(data, args.out)
    if chart_problem:
        print("compare: " + chart_problem, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
