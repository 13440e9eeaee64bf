#!/usr/bin/python3
"""Every relative link and anchor in the project's Markdown resolves.

    python3 scripts/check_links.py [FILE.md ...]      # default: README.md, BENCHMARKS.md, docs/

Checks each [text](target) and ![alt](target) outside code blocks and code spans: a target
without a scheme must name an existing file or folder (relative to the page), and a #anchor
must be a heading of the page it points to, spelled as GitHub spells heading anchors
(lowercase, punctuation dropped, spaces as hyphens, -1, -2, ... for repeats). Prints one line
per broken link (FILE:LINE: target: why) and exits 1 if there is any, else prints a count.
"""
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+(?:\([^()]*\))?)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(text):
    text = re.sub(r"`([^`]*)`", r"\1", text)  # code spans keep their text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of each line outside fenced code blocks, code spans blanked."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^\s*(```+|~~~+)", line)
            if m:
                if fence is None:
                    fence = m.group(1)[0] * len(m.group(1))
                elif m.group(1).startswith(fence):
                    fence = None
                continue
            if fence is None:
                yield n, re.sub(r"`[^`]*`", "``", line)


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if not m:
                continue
            # the heading's own text, with its code spans (blanked above) read again
            s = slug(raw_heading(path, line, m.group(2)))
            k = seen.get(s, 0)
            seen[s] = k + 1
            out.add(s if k == 0 else f"{s}-{k}")
        cache[path] = out
    return cache[path]


def raw_heading(path, blanked, text):
    """The heading's text as written (code spans were blanked for link scanning)."""
    if "``" not in blanked:
        return text
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = HEADING.match(line.rstrip("\n"))
            if m and re.sub(r"`[^`]*`", "``", m.group(2)) == text:
                return m.group(2)
    return text


def check(path):
    bad = []
    base = os.path.dirname(path)
    for n, line in lines_outside_code(path):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(base, file)) if file else path
            if not os.path.exists(dest):
                bad.append(f"{path}:{n}: {target}: no such file")
                continue
            if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append(f"{path}:{n}: {target}: no heading #{anchor} in {dest}")
    return bad


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    files = sys.argv[1:]
    if not files:
        files = ["README.md", "BENCHMARKS.md"]
        for d, _, names in os.walk("docs"):
            files += [os.path.join(d, x) for x in sorted(names) if x.endswith(".md")]
    bad = [b for f in files for b in check(f)]
    for b in bad:
        print(b)
    if bad:
        print(f"check_links: {len(bad)} broken link(s) in {len(files)} file(s)")
        return 1
    print(f"check_links: every relative link and anchor resolves ({len(files)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
