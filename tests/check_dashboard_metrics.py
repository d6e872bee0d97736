#!/usr/bin/env python3
"""Checks that a Grafana dashboard queries only series rkv exports.

Reads the dashboard's JSON, takes every metric name (rkv_...) in its panels'
query expressions, and checks each (a histogram's _bucket, _sum and _count
series by their family's name) against the names file that
tests/metrics_test.cc writes (the families rkv-coordinator and rkv-server
answered on GET /metrics, one a line). Exits 0 when every name is there,
1 naming those that are not, and 77 (a skip) when the names file does not
exist (the metrics test did not run: no promtool).

Usage: check_dashboard_metrics.py DASHBOARD.json NAMES_FILE
"""
import json
import re
import sys

NAME = re.compile(r"\brkv_[a-zA-Z0-9_:]*")
SKIP = 77


def expressions(node):
    """Every `expr` string anywhere in the dashboard (panels, rows)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def family_of(name):
    """The family a series name belongs to: a histogram's _bucket, _sum and
    _count series belong to the family named without the suffix."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        dashboard = json.load(f)
    try:
        with open(argv[2], encoding="utf-8") as f:
            exported = {line.strip() for line in f if line.strip()}
    except FileNotFoundError:
        print(f"check_dashboard_metrics: no {argv[2]}: run rkv_metrics_test first (it needs promtool)")
        return SKIP
    queried = set()
    for expr in expressions(dashboard):
        queried.update(NAME.findall(expr))
    if not queried:
        print(f"check_dashboard_metrics: {argv[1]} queries no rkv series")
        return 1
    missing = sorted(name for name in queried if family_of(name) not in exported)
    for name in missing:
        print(f"check_dashboard_metrics: {argv[1]} queries {name}, which no rkv process exports")
    if missing:
        return 1
    print(f"check_dashboard_metrics: all {len(queried)} series the dashboard queries are exported")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
