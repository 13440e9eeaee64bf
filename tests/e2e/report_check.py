#!/usr/bin/python3
"""Opens a ropelab report.html in headless Chromium and checks it as a reader would
(tests/e2e/report.sh; scripts/report_screenshot.sh for the docs' screenshot).

Drives Debian's chromium-headless-shell (or chromium) through the DevTools protocol over a pipe
(--remote-debugging-pipe: JSON messages on file descriptors 3 and 4), and checks that
- the page loads with no JavaScript error and makes no network request (every request it makes is
  the file itself or a data: URI);
- every run given has its toggle, and its name in the tables;
- the chart draws one curve per run (seed means off) and a mean curve per variant (on);
- unticking a run's toggle removes its curve and changes the canvas's pixels, and ticking it again
  brings both back.
Usage: report_check.py REPORT.html --runs NAME... [--screenshot PNG]
Exit 0 when every check holds; otherwise 1 with one line per failed check.
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser")


class Browser:
    def __init__(self, exe, profile):
        to_child, self._to_child = os.pipe()
        self._from_child, from_child = os.pipe()

        def fds():  # the child reads commands on 3 and writes answers on 4
            # Through copies: a pipe end may already be 3 or 4, and dup2 onto itself would keep
            # its close-on-exec flag.
            read_end, write_end = os.dup(to_child), os.dup(from_child)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--disable-extensions", "--window-size=1280,1500",
             "--user-data-dir=" + profile, "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buf, self._id, self.events = b"", 0, []

    def _read_message(self, deadline):
        while b"\0" not in self._buf:
            if time.time() > deadline:
                raise TimeoutError("no answer from the browser")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None, timeout=60):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, timeout=60):
        deadline = time.time() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            m = self._read_message(deadline)
            self.events.append(m)
            if m.get("method") == method:
                return m

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 (closing is best effort)
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def browser_exe():
    for b in BROWSERS:
        path = shutil.which(b)
        if path:
            return path
    return None


def check(report, runs, screenshot):
    exe = browser_exe()
    if exe is None:
        print("report_check: no headless Chromium (Debian's chromium-headless-shell)")
        return 77
    failures = []
    with tempfile.TemporaryDirectory(prefix="report-check-") as profile:
        b = Browser(exe, profile)
        try:
            target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            s = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Network", "Page", "Runtime"):
                b.call(domain + ".enable", session=s)
            url = "file://" + os.path.abspath(report)
            b.call("Page.navigate", {"url": url}, session=s)
            b.wait_event("Page.loadEventFired")

            def js(expr):
                r = b.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                                "awaitPromise": True}, session=s)
                if "exceptionDetails" in r:
                    raise RuntimeError(f"{expr[:60]}: {r['exceptionDetails'].get('text')}")
                return r["result"].get("value")

            failures += page_checks(js, runs)
            if screenshot:
                js("document.getElementById('means').checked = true;"
                   "document.getElementById('means').dispatchEvent(new Event('input'))")
                shot = b.call("Page.captureScreenshot", {"format": "png"}, session=s)
                with open(screenshot, "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
            requests = [e["params"]["request"]["url"] for e in b.events
                        if e.get("method") == "Network.requestWillBeSent"]
            outside = [u for u in requests if not (u == url or u.startswith("data:"))]
            if outside:
                failures.append(f"the page made {len(outside)} network request(s): {outside[:3]}")
            errors = [e["params"]["exceptionDetails"].get("text", "")
                      for e in b.events if e.get("method") == "Runtime.exceptionThrown"]
            if errors:
                failures.append(f"JavaScript errors: {errors[:3]}")
            print(f"report_check: {len(requests)} request(s), {len(outside)} beyond the file and data: URIs")
        finally:
            b.close()
    for f in failures:
        print("report_check: FAILED: " + f)
    return 1 if failures else 0


def page_checks(js, runs):
    failures = []
    toggles = js("[...document.querySelectorAll('#runs input[data-run]')].map(e => e.dataset.run)")
    missing = [r for r in runs if r not in toggles]
    if missing or len(toggles) != len(runs):
        failures.append(f"toggles for {len(toggles)} runs, expected {len(runs)} (missing {missing})")
    tables = js("document.querySelectorAll('#tables table').length")
    text = js("document.getElementById('tables').textContent")
    not_in_tables = [r for r in runs if r not in text]
    if tables == 0 or not_in_tables:
        failures.append(f"{tables} tables; runs not in them: {not_in_tables}")
    # One curve per run, with the seed means off.
    js("document.getElementById('means').checked = false;"
       "document.getElementById('means').dispatchEvent(new Event('input'))")
    labels = js("window.ropelabChart.data.datasets.map(d => d.label)")
    if sorted(labels) != sorted(runs):
        failures.append(f"per-run curves {sorted(labels)} != runs {sorted(runs)}")
    # A toggle hides its curve, and the drawing changes; ticking it brings both back.
    pixels = "window.ropelabChart.canvas.toDataURL()"
    before = js(pixels)
    first = runs[0]
    click = f"document.querySelector('#runs input[data-run=\"{first}\"]').click()"
    js(click)
    after = js("window.ropelabChart.data.datasets.map(d => d.label)")
    if first in after or len(after) != len(runs) - 1:
        failures.append(f"unticking {first} left the curves {after}")
    if js(pixels) == before:
        failures.append(f"unticking {first} did not change the chart's pixels")
    js(click)
    if js(pixels) != before or len(js("window.ropelabChart.data.datasets")) != len(runs):
        failures.append(f"ticking {first} again did not restore the chart")
    # Seed means: one mean curve per variant.
    js("document.getElementById('means').checked = true;"
       "document.getElementById('means').dispatchEvent(new Event('input'))")
    means = js("window.ropelabChart.data.datasets.filter(d => !d.band).map(d => d.variant)")
    variants = sorted({r.rsplit(".seed", 1)[0] for r in runs})
    if sorted(means) != variants:
        failures.append(f"mean curves {sorted(means)} != variants {variants}")
    # The other controls redraw without error: log scale, token axis, smoothing off.
    for expr in ("document.getElementById('logy').checked = true;"
                 "document.getElementById('logy').dispatchEvent(new Event('input'))",
                 "document.getElementById('xaxis').value = 'tokens';"
                 "document.getElementById('xaxis').dispatchEvent(new Event('input'))",
                 "document.getElementById('smooth').value = 0;"
                 "document.getElementById('smooth').dispatchEvent(new Event('input'))"):
        js(expr)
    if js("window.ropelabChart.options.scales.y.type") != "logarithmic":
        failures.append("the log-scale switch did not reach the chart")
    if js("window.ropelabChart.options.scales.x.title.text") != "training tokens":
        failures.append("the token axis did not reach the chart")
    js("document.getElementById('logy').checked = false;"
       "document.getElementById('logy').dispatchEvent(new Event('input'));"
       "document.getElementById('xaxis').value = 'step';"
       "document.getElementById('xaxis').dispatchEvent(new Event('input'));"
       "document.getElementById('smooth').value = window.ropelabChart && 0.6;"
       "document.getElementById('smooth').dispatchEvent(new Event('input'))")
    print(f"report_check: {len(toggles)} run toggles, {tables} tables, {len(labels)} curves, "
          f"{len(means)} mean curves; a toggle hid and restored {first}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report")
    ap.add_argument("--runs", nargs="+", required=True, help="the run names the page must show")
    ap.add_argument("--screenshot", help="write a PNG of the page (seed means on)")
    a = ap.parse_args()
    return check(a.report, a.runs, a.screenshot)


if __name__ == "__main__":
    sys.exit(main())
