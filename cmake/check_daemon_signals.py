#!/usr/bin/env python3
"""Checks that every rkv daemon blocks its signals before anything else runs.

A daemon of rkv takes SIGTERM, SIGINT and SIGHUP in its main thread with
sigwait or sigtimedwait (docs/design.md §10). That is only safe when every
thread of the process blocks them, and a thread inherits its creator's mask,
so the block must come before anything can start a thread: gRPC and RocksDB
start theirs on first use. The kernel gives a process-directed signal to any
thread that does not block it, where it takes its default action and ends
the process with no line in its log. Two rules, per source file that waits
for signals (calls sigwait, sigtimedwait, sigwaitinfo or signalfd) and
defines main:

  1. the first statement of main calls rkv::BlockDaemonSignals
     (common/daemon_signals.h);
  2. the signals it blocks include SIGHUP: a daemon never leaves SIGHUP at
     its default action (a terminal's hang-up or a reload sent to every rkv
     unit would end it).

Usage: check_daemon_signals.py [--root DIR]
Exits 0 when every daemon keeps both rules, 1 otherwise (one line per
problem), 2 when no daemon was found under the root at all (a check that
checks nothing must not pass).
"""

import argparse
import os
import re
import sys

from check_layer_includes import source_files

WAITS = re.compile(r"\b(sigwait|sigtimedwait|sigwaitinfo|signalfd)\s*\(")
MAIN = re.compile(r"\bint\s+main\s*\([^)]*\)\s*\{")
BLOCK = re.compile(r"^(?:const\s+)?(?:sigset_t\s+\w+\s*=\s*)?(?:rkv::)?BlockDaemonSignals\s*\(\s*\{([^}]*)\}")


def strip_comments(text):
    """The text without // and /* */ comments (string literals kept as they
    are: no rkv main starts with one)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def daemon_candidates(root):
    """The .cc files the include check walks (check_layer_includes.py's
    source_files: hidden folders and build trees left out), less those
    under a folder named *_violation: sources that break the rules on
    purpose (tests/layering/), checked only when one is the root."""
    for path in source_files(root):
        if path.endswith(".cc") and not any(part.endswith("_violation") for part in path.split("/")[:-1]):
            yield path


def check_file(path, text):
    """The problems of one source file; None when it is no daemon."""
    code = strip_comments(text)
    main = MAIN.search(code)
    if main is None or WAITS.search(code) is None:
        return None
    first = code[main.end():].lstrip()
    block = BLOCK.match(first)
    if block is None:
        statement = first.split(";", 1)[0].strip().replace("\n", " ")
        return [f"{path}: main waits for signals but its first statement is not BlockDaemonSignals "
                f"(it is: {statement[:100]})"]
    signals = {s.strip() for s in block.group(1).split(",") if s.strip()}
    if "SIGHUP" not in signals:
        return [f"{path}: main blocks {', '.join(sorted(signals)) or 'nothing'} but not SIGHUP: "
                f"a daemon takes SIGHUP (reload, or log it) instead of dying of it"]
    return []


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = parser.parse_args()
    problems = []
    daemons = []
    for path in daemon_candidates(args.root):
        with open(os.path.join(args.root, path), encoding="utf-8", errors="replace") as f:
            found = check_file(path, f.read())
        if found is None:
            continue
        daemons.append(path)
        problems.extend(found)
    if not daemons:
        print(f"check_daemon_signals: no source under {args.root} defines a main that waits for signals")
        return 2
    for p in problems:
        print(p)
    if problems:
        print(f"check_daemon_signals: {len(problems)} of {len(daemons)} daemons break the signal rules")
        return 1
    print(f"check_daemon_signals: {len(daemons)} daemons ({', '.join(daemons)}) block their signals, "
          f"SIGHUP included, first thing in main")
    return 0


if __name__ == "__main__":
    sys.exit(main())
