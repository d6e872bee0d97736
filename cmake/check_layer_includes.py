#!/usr/bin/env python3
"""Checks that every #include "..." of rkv's sources stays within the layers.

Reads the layer table (cmake/layers.txt: which files belong to which layer,
which layers each may use), then scans every .h and .cc under the source
root. A file may include files of its own layer and of the layers below it
(those its layer may use, and what they may use in turn). The linker checks
only symbols (cmake/RkvLayers.cmake); this catches header-only code, which
the linker never sees.

Usage: check_layer_includes.py [--root DIR] [--table FILE]
Exits 0 when every include is allowed; otherwise prints one line per
violation and exits 1 (2 for a malformed table).
"""

import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".cc")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
# Public headers are included as "rkv/x.h" (their include folder is on the
# path); every other include is a path from the source root.
PUBLIC_INCLUDE_PREFIX = "rkv/"
PUBLIC_INCLUDE_DIR = "client/include/"


class TableError(Exception):
    pass


def glob_to_regex(glob):
    """`**/` matches any folders (or none), `**` anything, `*` and `?` stay
    within one folder."""
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


class LayerTable:
    def __init__(self, path):
        self.uses = {}  # layer -> layers it may use directly
        self.globs = []  # (regex, glob, layer), in the file's order
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                words = line.split("#", 1)[0].split()
                if not words:
                    continue
                if len(words) < 2 or words[1] not in ("uses", "files"):
                    raise TableError(f"{path}:{number}: expected 'LAYER uses ...' or 'LAYER files ...'")
                layer, kind, values = words[0], words[1], words[2:]
                if kind == "uses":
                    if layer in self.uses:
                        raise TableError(f"{path}:{number}: a second 'uses' line for {layer}")
                    self.uses[layer] = values
                else:
                    self.globs.extend((glob_to_regex(g), g, layer) for g in values)
        for _, glob, layer in self.globs:
            if layer not in self.uses:
                raise TableError(f"{path}: {layer} has files ({glob}) but no 'uses' line")
        for layer, used in self.uses.items():
            for other in used:
                if other != "*" and other not in self.uses:
                    raise TableError(f"{path}: {layer} uses {other}, which is no layer of the table")
        self.below = {layer: self._closure(layer, ()) for layer in self.uses}

    def _closure(self, layer, path):
        if layer in path:
            raise TableError("the layers form a cycle: " + " -> ".join(path + (layer,)))
        reach = set()
        for other in self.uses[layer]:
            if other == "*":
                reach.update(l for l in self.uses if l != layer)
                continue
            reach.add(other)
            reach.update(self._closure(other, path + (layer,)))
        return reach

    def layer_of(self, path):
        for regex, _, layer in self.globs:
            if regex.match(path):
                return layer
        return None

    def allows(self, layer, other):
        return other == layer or other in self.below[layer]


def source_files(root):
    for folder, dirs, files in os.walk(root):
        # Hidden folders and build trees hold no sources of the project.
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and not os.path.exists(os.path.join(folder, d, "CMakeCache.txt")))
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")


def included_path(name):
    """The path from the source root that `#include "name"` means."""
    if name.startswith(PUBLIC_INCLUDE_PREFIX):
        return PUBLIC_INCLUDE_DIR + name
    return name


def check(root, table):
    problems = []
    checked = 0
    for path in source_files(root):
        layer = table.layer_of(path)
        if layer is None:
            problems.append(f"{path} is in no layer of the table: add it to a 'files' line")
            continue
        checked += 1
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target = included_path(match.group(1))
                other = table.layer_of(target)
                if other is None:
                    problems.append(f"{path}:{number}: includes {match.group(1)}, which is in no layer of the table")
                elif not table.allows(layer, other):
                    problems.append(f"{path}:{number}: file {path} (layer {layer}) includes {match.group(1)} "
                                    f"(layer {other}), which is not below {layer}")
    return checked, problems


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(here), help="the source root (default: the project's)")
    parser.add_argument("--table", default=os.path.join(here, "layers.txt"), help="the layer table")
    args = parser.parse_args()
    try:
        table = LayerTable(args.table)
    except TableError as e:
        print(f"check_layer_includes: {e}", file=sys.stderr)
        return 2
    checked, problems = check(args.root, table)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_layer_includes: {len(problems)} include(s) break the layers ({args.table})")
        return 1
    print(f"check_layer_includes: {checked} files, every include within the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
