#!/usr/bin/python3
"""The folders of src/ form a layered order: no two include each other, directly or through
others.

    python3 scripts/check_layers.py [SRC_DIR]        # default: src/ beside this script

Reads every #include "folder/..." of the .h, .cpp and .inc files under SRC_DIR, builds the graph
of folders, and prints the order (each folder includes only folders before it). Where there is
a cycle, prints each include that closes it (FILE: #include "X/..." while X includes this
folder) and exits 1.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)/')


def graph(src):
    edges = {}  # folder -> {folder: [file, ...]}
    for d, _, names in os.walk(src):
        rel = os.path.relpath(d, src)
        if rel == ".":
            continue
        top = rel.split(os.sep)[0]
        edges.setdefault(top, {})
        for n in sorted(names):
            if not n.endswith((".h", ".cpp", ".inc")):
                continue
            path = os.path.join(d, n)
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = INCLUDE.match(line)
                    if m and m.group(1) != top and os.path.isdir(os.path.join(src, m.group(1))):
                        edges[top].setdefault(m.group(1), []).append(path)
    return edges


def reaches(edges, a, b):
    """Whether folder a includes folder b, directly or through others."""
    seen, todo = set(), [a]
    while todo:
        x = todo.pop()
        for y in edges.get(x, {}):
            if y == b:
                return True
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return False


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    edges = graph(src)
    bad = []
    for a in sorted(edges):
        for b, files in sorted(edges[a].items()):
            if reaches(edges, b, a):
                bad.append(f'{files[0]}: #include "{b}/..." while {b}/ includes {a}/')
    if bad:
        for b in bad:
            print(b)
        print(f"check_layers: {len(bad)} include(s) close a cycle between folders of {src}")
        return 1
    order, left = [], dict(edges)
    while left:
        ready = sorted(a for a in left if all(b in order for b in left[a]))
        order += ready
        for a in ready:
            del left[a]
    print("check_layers: the folders are layered: " + " < ".join(order))
    return 0


if __name__ == "__main__":
    sys.exit(main())
