#!/usr/bin/env python3
"""Drive headless Chromium over the DevTools protocol, with the standard library only.

Chromium's --remote-debugging-pipe speaks the DevTools protocol over file
descriptors 3 (commands in) and 4 (responses and events out), one JSON
message per NUL-terminated chunk, so no websocket client is needed. Used by
the HTML report's browser test, its benchmark and the docs screenshots.

    with Chromium(width=1600, height=1000) as browser:
        page = browser.open(pathlib.Path("report.html").resolve().as_uri())  # waits for load
        page.evaluate("document.title")
        page.click(100, 200)
        png = page.screenshot()

As a program it saves a screenshot of a page (after optional JavaScript):

    python3 scripts/headless_chromium.py report.html out.png [--width W --height H] [--js CODE]
"""
import argparse
import base64
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    """Path of a Chromium binary ($CHROMIUM first), or None."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if shutil.which(env) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class ProtocolError(RuntimeError):
    pass


class Chromium:
    """A headless Chromium process and its DevTools pipe."""

    def __init__(self, binary=None, width=1600, height=1000, timeout=60):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise FileNotFoundError("chromium not found (Debian package 'chromium'; scripts/setup.sh installs it)")
        self.width, self.height, self.timeout = width, height, timeout
        self.profile = tempfile.mkdtemp(prefix="anefit-chromium-")
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        # Move the child's ends above 2..4 so the dup2 calls below cannot clobber them.
        child_in = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
        child_out = fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
        os.close(cmd_r)
        os.close(out_w)

        def wire():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        args = [self.binary, "--headless", "--remote-debugging-pipe", "--no-sandbox",
                "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--hide-scrollbars",
                "--mute-audio", f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=wire, pass_fds=(3, 4))
        os.close(child_in)
        os.close(child_out)
        self.out = cmd_w
        self.inp = out_r
        self.buffer = b""
        self.next_id = 0
        self.events = []

    # --- transport -------------------------------------------------------
    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self.inp, 1 << 20)
            if not chunk:
                raise ProtocolError("chromium closed the DevTools pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method, params=None, session=None, timeout=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise ProtocolError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method, session=None, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, m in enumerate(self.events):
                if m["method"] == method and (session is None or m.get("sessionId") == session):
                    return self.events.pop(i)
            m = self._read_message(deadline)
            if "method" in m:
                self.events.append(m)

    # --- pages -------------------------------------------------------------
    def open(self, url, wait=True):
        """A new tab at `url`; with `wait`, returns after its load event."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        if url:
            page.navigate(url, wait=wait)
        return page

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout=10)
            except Exception:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self.out, self.inp):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    def __init__(self, browser, session):
        self.browser = browser
        self.session = session

    def send(self, method, params=None, timeout=None):
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def navigate(self, url, wait=True):
        """Navigates; returns the wall time (s) until the load event, or None."""
        t0 = time.perf_counter()
        self.send("Page.navigate", {"url": url})
        if not wait:
            return None
        self.browser.wait_event("Page.loadEventFired", session=self.session)
        return time.perf_counter() - t0

    def evaluate(self, expression, await_promise=False):
        """The value of a JavaScript expression; raises on an exception."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": await_promise})
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text")
            raise ProtocolError(f"javascript error: {text}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression, timeout=30):
        """Polls until `expression` is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = self.evaluate(expression)
            if v:
                return v
            time.sleep(0.02)
        raise TimeoutError(f"timed out waiting for: {expression}")

    def click(self, x, y):
        """A real left click (press and release) at viewport coordinates."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            params = {"type": kind, "x": x, "y": y}
            if kind != "mouseMoved":
                params.update(button="left", clickCount=1)
            self.send("Input.dispatchMouseEvent", params)

    def screenshot(self, clip=None):
        params = {"format": "png"}
        if clip:
            params["clip"] = dict(clip, scale=1)
        return base64.b64decode(self.send("Page.captureScreenshot", params)["data"])

    def dom(self):
        return self.evaluate("document.documentElement.outerHTML")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("page", help="HTML file or URL")
    ap.add_argument("png", help="screenshot to write")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--js", action="append", default=[], help="JavaScript to run before the shot")
    ap.add_argument("--clip", help="x,y,width,height of the area to save")
    args = ap.parse_args()
    url = args.page if "://" in args.page else pathlib.Path(args.page).resolve().as_uri()
    with Chromium(width=args.width, height=args.height) as browser:
        page = browser.open(url)
        page.wait_for("document.documentElement.getAttribute('data-painted')")
        for code in args.js:
            page.evaluate(code)
        time.sleep(0.2)
        clip = None
        if args.clip:
            x, y, w, h = (float(v) for v in args.clip.split(","))
            clip = {"x": x, "y": y, "width": w, "height": h}
        pathlib.Path(args.png).write_bytes(page.screenshot(clip))


if __name__ == "__main__":
    main()
