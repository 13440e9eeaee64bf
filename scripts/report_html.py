#!/usr/bin/python3
"""Writes OUT/report.html: one self-contained page of a comparison (called by `ropelab compare`
and `ropelab ablate`), readable from the run directory with no network.

It holds the comparison's Markdown (compare.md: the tables, the seed statistics and significance
tests, the length and probe cards, their figures inlined) and interactive curves of every run's
metrics (Chart.js from Debian's libjs-chart.js, inlined): any train or valid series, runs or the
mean of each variant's seeds with a +-1 std band, a toggle per run and per variant, EMA
smoothing, a log scale, and a step or token axis.
Usage: report_html.py --out DIR --markdown FILE [--title T] [--smooth 0.6] [--live RUN]... RUN...
"""
import argparse
import base64
import html
import json
import math
import os
import re
import sys
import tempfile

import markdown

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_runs import load  # noqa: E402  (the runs' metrics, as the PNG plots read them)

CHART_JS = ("/usr/share/javascript/chart.js/chart.min.js",
            "/usr/share/javascript/chart.js/chart.umd.min.js",
            "/usr/share/javascript/chart.js/chart.umd.js")


def chart_js():
    for path in CHART_JS:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    sys.exit("report_html: Chart.js not found (" + CHART_JS[0] + "; Debian's libjs-chart.js: "
             "bash scripts/setup.sh installs it)")


def clean(values):
    """A series as a JSON list: numbers, NaN and infinities as null."""
    out = []
    for v in values:
        v = float(v)
        out.append(v if math.isfinite(v) else None)
    return out


def run_entry(path, live):
    name, groups = load(path, live)
    m = re.match(r"^(.*)\.seed(\d+)$", name)
    series = {}
    for split, cols in groups.items():
        if "step" not in cols:
            continue
        series[split] = {k: clean(v) for k, v in cols.items()}
    return {"name": name, "variant": m.group(1) if m else name,
            "seed": int(m.group(2)) if m else None, "series": series}


def inline_images(body, base):
    """<img src="file.png"> of files beside compare.md become data: URIs (one file to share)."""
    def repl(m):
        src = html.unescape(m.group(1))
        path = os.path.join(base, src)
        if re.match(r"^[a-z]+:", src) or not os.path.isfile(path):
            return m.group(0)
        with open(path, "rb") as f:
            data = base64.b64encode(f.read()).decode()
        return m.group(0).replace(m.group(1), "data:image/png;base64," + data)
    return re.sub(r'<img[^>]*\bsrc="([^"]+)"', repl, body)


def write_atomic(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".report-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the directory report.html goes to")
    ap.add_argument("--markdown", required=True, help="compare.md, rendered below the curves")
    ap.add_argument("--title", default="", help="the page's title (default: the out directory)")
    ap.add_argument("--smooth", type=float, default=0.6, help="the EMA's start value")
    ap.add_argument("--live", action="append", default=[],
                    help="a run being trained: read its metrics.jsonl (repeatable)")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = [run_entry(r, a.live) for r in a.runs]
    with open(a.markdown, encoding="utf-8") as f:
        # compare.md has no markup of its own: a '<' in it (a run's name) is text.
        text = f.read().replace("&", "&amp;").replace("<", "&lt;")
    body = markdown.markdown(text, extensions=["tables", "fenced_code"])
    body = inline_images(body, os.path.dirname(os.path.abspath(a.markdown)))
    title = a.title or os.path.basename(os.path.abspath(a.out))
    data = json.dumps({"runs": runs, "smooth": a.smooth}, separators=(",", ":"))
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "report_template.html"),
              encoding="utf-8") as f:
        page = f.read()
    page = (page.replace("@TITLE@", html.escape(title))
            .replace("@CHARTJS@", chart_js().replace("</script", "<\\/script"))
            .replace("@DATA@", data.replace("<", "\\u003c"))
            .replace("@BODY@", body))
    out = os.path.join(a.out, "report.html")
    write_atomic(out, page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
