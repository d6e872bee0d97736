#!/usr/bin/env python3
"""Checks that the code names the documentation cites still exist.

Scans the backquoted spans of docs/*.md and README.md. A span that reads as
a code name is checked against the tree:
  - a path (`server/table/table.h`, `server/table/table.{h,cc}`, `tests/layering/`):
    the file or folder exists; a bare file name (`tcp_frame.h`) exists in
    some folder;
  - a qualified name (`Server::Start`, `Admin.ListShard`), a call
    (`FenceWait(lease)`), a CamelCase name (`RebuildTable`), a constant
    (`kLayoutVersion`), a snake_case name (`server_ids`, `fenced_since_`)
    or a macro (`RKV_EXPORT`): each identifier in it is a word of some
    source file (.h, .cc, .proto, scripts, CMake files).
Anything else (flags, commands, numbers, single English words, status
codes) is prose and left alone.

Usage: check_doc_names.py [--root DIR] [DOC...]
Exits 0 when every cited name exists; otherwise prints one line per stale
name (file, line, name) and exits 1.
"""

import argparse
import os
import re
import sys

# What counts as a source file whose words are code names.
SOURCE_SUFFIXES = (".h", ".cc", ".proto", ".sh", ".py", ".cmake", ".in", ".json", ".service")
SOURCE_NAMES = ("CMakeLists.txt", "run")
# Folders whose files are not code: measurement results and the documents
# themselves. (The negative test's stale names are in files no source
# suffix matches: tests/docs/stale_names.*.)
SKIP_DIRS = ("docs", os.path.join("bench", "results"))
PATH_SUFFIXES = (".h", ".cc", ".md", ".sh", ".proto", ".py", ".cmake", ".txt", ".json", ".service")

# Names the documents cite on purpose though no rkv source holds them: the
# API of a library rkv uses, or a kind of test rkv's own tests are compared
# with. Keep this short; a stale rkv name is never added here.
EXTERNAL_NAMES = {
    "DBTestBase",  # RocksDB's test fixture (STYLE.md's model)
    "Resume",      # RocksDB's DB::Resume
    "DB",          # RocksDB's DB
    "SyncWAL",     # RocksDB's DB::SyncWAL
}

SPAN = re.compile(r"`([^`\n]+)`")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
WORD = re.compile(IDENT)
PATH = re.compile(r"^\.?[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_.\-{},]*)+$")
BARE_FILE = re.compile(r"^[A-Za-z0-9_\-]+\.(?:h|cc|proto|sh|py|cmake)$")
QUALIFIED = re.compile(rf"^{IDENT}(?:(?:::|\.){IDENT})+(?:\(.*\))?$")
CALL = re.compile(rf"^({IDENT})\(.*\)$")
CAMEL = re.compile(r"^[A-Z][a-z][a-z0-9]*[A-Z][A-Za-z0-9]*$")
CONSTANT = re.compile(r"^k[A-Z][A-Za-z0-9]*$")
SNAKE = re.compile(r"^[a-z][a-z0-9]+(?:_[a-z0-9]+)+_?$|^[a-z][a-z0-9]+_$")
MACRO = re.compile(r"^RKV_[A-Z0-9_]+$")
CODE_FENCE = re.compile(r"^\s*```")


def source_words(root):
    words = set()
    files = set()
    folders = set()
    for folder, dirs, names in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = sorted(d for d in dirs if d != ".git"
                         and not os.path.exists(os.path.join(folder, d, "CMakeCache.txt")))
        if rel != ".":
            folders.add(rel.replace(os.sep, "/"))
        for name in names:
            path = os.path.join(rel, name) if rel != "." else name
            files.add(path.replace(os.sep, "/"))
            if rel.startswith(SKIP_DIRS):
                continue
            if not (name.endswith(SOURCE_SUFFIXES) or name in SOURCE_NAMES):
                continue
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                words.update(WORD.findall(f.read()))
    return words, files, folders


def expand_braces(path):
    """server/table/table.{h,cc} -> server/table/table.h, server/table/table.cc."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(path[:m.start()] + alt + path[m.end():]))
    return out


class Tree:
    def __init__(self, root):
        self.words, self.files, self.folders = source_words(root)
        self.basenames = {f.rsplit("/", 1)[-1] for f in self.files}

    def has_path(self, path):
        path = path.rstrip("/")
        return path in self.files or path in self.folders

    def has_words(self, name):
        return all(w in self.words or w in EXTERNAL_NAMES for w in WORD.findall(name))


def stale(span, tree):
    """The reason `span` names nothing in the tree, or None."""
    text = span.strip()
    first = text.split()[0] if text.split() else ""
    # A command line whose first word is a script of the tree.
    if " " in text and PATH.match(first) and first.endswith(PATH_SUFFIXES):
        text = first
    if " " in text:
        return None
    if PATH.match(text) and "/" in text:
        top = text.lstrip("./").split("/", 1)[0]
        if not tree.has_path(top) and top not in ("docs",):
            return None  # not a path of this tree (a URL part, a ratio)
        missing = [p for p in expand_braces(text) if not tree.has_path(p)]
        return f"no file or folder {', '.join(missing)}" if missing else None
    if BARE_FILE.match(text):
        return None if text in tree.basenames else "no file of that name"
    name = re.sub(r"\[[^\]]*\]$", "", text)
    if QUALIFIED.match(name) or CALL.match(name):
        name = name.split("(", 1)[0]
    elif not (CAMEL.match(name) or CONSTANT.match(name) or SNAKE.match(name) or MACRO.match(name)):
        return None
    missing = [w for w in WORD.findall(name) if w not in tree.words and w not in EXTERNAL_NAMES]
    return f"no source file names {', '.join(missing)}" if missing else None


def check_doc(path, shown, tree):
    problems = []
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if CODE_FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            for span in SPAN.findall(line):
                reason = stale(span, tree)
                if reason:
                    problems.append(f"{shown}:{number}: `{span}`: {reason}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        help="the source root (default: the project's)")
    parser.add_argument("docs", nargs="*", help="documents to check (default: docs/*.md and README.md)")
    args = parser.parse_args()
    docs = args.docs
    if not docs:
        folder = os.path.join(args.root, "docs")
        docs = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".md")]
        docs.append(os.path.join(args.root, "README.md"))
    tree = Tree(args.root)
    problems = []
    for doc in docs:
        problems.extend(check_doc(doc, os.path.relpath(doc, args.root), tree))
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_doc_names: {len(problems)} name(s) cited in the documents no longer exist")
        return 1
    print(f"check_doc_names: every code name cited in {len(docs)} documents exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
