"""Render ``memtune page`` output in headless Chromium: screenshots and the browser's console.

    python benchmarks/page_render.py [--chromium PATH] [--out benchmarks/page]

Writes three pages (the bundled 70B example; the same job made not to fit, with an OOM log; a
config Megatron refuses), then opens each in headless Chromium (Debian's
``chromium-headless-shell``) over the DevTools protocol on a pipe (no network, no port), at a
phone's width (390 CSS px, device scale 2) and a desktop's (1100 px), and in print media, saves
full-page PNG screenshots, and logs every console message, JavaScript exception, failed load and
browser log entry. A control page with a deliberate console error and a missing image shows
that the capture works. Exits 1 if any page logged an error. The log is ``OUT/render.log``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama3-70b-sft.yaml"
PAGES = {
    "llama3-70b-sft": [str(EXAMPLE)],
    "llama3-70b-oom": [
        str(EXAMPLE),
        "model.recompute_granularity=null",
        "train.micro_batch_size=2",
        "--oom-log",
        str(ROOT / "tests/diagnose/fixtures/h200/capacity.log"),
    ],
    "broken-llama3-8b": [str(ROOT / "examples/broken-llama3-8b.yaml")],
}
VIEWS = {  # name: (width, height, device scale, mobile, media)
    "phone": (390, 844, 2, True, "screen"),
    "desktop": (1100, 900, 1, False, "screen"),
    "print": (816, 1056, 1, False, "print"),
}


class DevTools:
    """Chrome DevTools protocol over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-framed)."""

    def __init__(self, chromium: str) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="memtune-chromium-")
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe"]
        flags += [f"--user-data-dir={self._profile}", "--no-first-run", "--hide-scrollbars"]

        def fds() -> None:  # the child's fd 3 reads what we send, fd 4 writes what we read
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.process = subprocess.Popen(
            [chromium, *flags, "about:blank"],
            pass_fds=(3, 4, to_browser_r, from_browser_w),  # close_fds runs after preexec_fn
            preexec_fn=fds,  # noqa: PLW1509 - this script starts no threads
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._id = 0
        self.events: list[dict] = []

    def call(self, method: str, session: str | None = None, **params: object) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read()
            if event.get("method") == method:
                return event
            self.events.append(event)

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        shutil.rmtree(self._profile, ignore_errors=True)


def problems_of(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            out.append(f"console.{params.get('type')}: {text}")
        elif method == "Runtime.exceptionThrown":
            out.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif method == "Log.entryAdded":
            entry = params["entry"]
            out.append(f"log {entry['level']} ({entry['source']}): {entry['text']}")
        elif method == "Network.loadingFailed":
            out.append(f"load failed: {params.get('errorText')}")
        elif method == "Network.requestWillBeSent" and not params["request"]["url"].startswith("file:"):
            out.append(f"network request: {params['request']['url']}")
    return out


def render(browser: DevTools, html: Path, out: Path, log: list[str]) -> int:
    errors = 0
    for view, (width, height, scale, mobile, media) in VIEWS.items():
        target = browser.call("Target.createTarget", url="about:blank")["targetId"]
        session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable", session)
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=scale,
            mobile=mobile,
        )
        browser.call("Emulation.setEmulatedMedia", session, media=media)
        browser.events.clear()
        browser.call("Page.navigate", session, url=html.resolve().as_uri())
        browser.wait_for("Page.loadEventFired")
        metrics = browser.call("Page.getLayoutMetrics", session)["cssContentSize"]
        overflow = browser.call(
            "Runtime.evaluate",
            session,
            expression="document.documentElement.scrollWidth > window.innerWidth",
            returnByValue=True,
        )["result"]["value"]
        shot = browser.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
        name = f"{html.stem}-{view}.png"
        (out / name).write_bytes(base64.b64decode(shot["data"]))
        problems = problems_of(browser.events)
        errors += sum(not p.startswith("log verbose") for p in problems)
        log.append(
            f"{html.name} {view} ({width}x{height} css px, scale {scale}, {media}): content "
            f"{metrics['width']:.0f}x{metrics['height']:.0f} css px, horizontal page scroll: "
            f"{'yes' if overflow else 'no'}; {len(problems)} console/log/network messages -> {name}"
        )
        log.extend(f"    {p}" for p in problems)
        browser.call("Target.closeTarget", targetId=target)
    return errors


def _control(browser: DevTools, work: Path, log: list[str]) -> int:
    """A page with a console error and a missing image: the log must show both, or the capture
    above proves nothing. Returns 1 when it does not."""
    page = work / "control.html"
    page.write_text('<!doctype html><img src="missing.png"><script>console.error("control error")</script>')
    target = browser.call("Target.createTarget", url="about:blank")["targetId"]
    session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.call(f"{domain}.enable", session)
    browser.events.clear()
    browser.call("Page.navigate", session, url=page.as_uri())
    browser.wait_for("Page.loadEventFired")
    browser.call("Runtime.evaluate", session, expression="1")  # let pending events arrive
    problems = problems_of(browser.events)
    browser.call("Target.closeTarget", targetId=target)
    seen = any("control error" in p for p in problems) and any("load failed" in p for p in problems)
    log.append(
        f"control page (a console.error and a missing image): {'captured' if seen else 'NOT captured'}"
    )
    log.extend(f"    {p}" for p in problems)
    return 0 if seen else 1


def main() -> int:
    cli = argparse.ArgumentParser()
    cli.add_argument(
        "--chromium", default=shutil.which("chromium-headless-shell") or shutil.which("chromium")
    )
    cli.add_argument("--out", default=str(ROOT / "benchmarks" / "page"))
    args = cli.parse_args()
    if not args.chromium:
        sys.exit("no Chromium: apt-get install chromium-headless-shell (or pass --chromium PATH)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([args.chromium, "--version"], capture_output=True, text=True, check=False)
    log = [f"browser: {version.stdout.strip() or args.chromium}"]
    errors = 0
    with tempfile.TemporaryDirectory() as work:
        browser = DevTools(args.chromium)
        try:
            for name, words in PAGES.items():
                html = Path(work) / f"{name}.html"
                run = subprocess.run(
                    [sys.executable, "-m", "memtune", "page", *words, "-o", str(html)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                shown = run.stdout.strip().replace(f"{work}/", "")
                log.append(f"memtune page {' '.join(Path(w).name for w in words)}: {shown}")
                if run.returncode:
                    log.append(f"    failed ({run.returncode}): {run.stderr.strip()}")
                    errors += 1
                    continue
                log.append(f"    {html.stat().st_size:,} bytes")
                errors += render(browser, html, out, log)
            errors += _control(browser, Path(work), log)
        finally:
            browser.close()
    log.append(f"errors: {errors}")
    (out / "render.log").write_text("\n".join(log) + "\n")
    print("\n".join(log))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
