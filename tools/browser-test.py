#!/usr/bin/python3
"""The page of `earmark serve` in a real browser: Debian's chromium, headless, driven over the Chrome DevTools
Protocol (python3-websocket; both from tools/setup.sh).

    tools/browser-test.py --earmark .build/debug/earmark --catalog C.earcat --listen-wav track.wav \
        --file clip.wav --expect TITLE [--screenshot /tmp/earmark-page.png] [--track-screenshot /tmp/track.png]

It starts a throwaway `earmark serve --port 0` on loopback, starts chromium with a fake microphone that plays
--listen-wav (a WAV of a catalog track), opens the page and checks three things:
  file    sets --file on the page's file input (DOM.setFileInputFiles) and expects the result to name --expect;
  track   expects the best match's track card to open with its timeline and the matched stretch highlighted;
  listen  clicks Listen and expects the page to show --expect as the current track within 10 s, with a
          position that moves with the clock, and a playhead on the timeline of the track card.
Then it saves a screenshot. Exit 0 when all pass, 1 when one fails, 2 when it cannot run (no chromium, …).
"""
import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import websocket  # Debian: python3-websocket
except ImportError:
    print("browser-test: python3-websocket is missing (tools/setup.sh installs it)", file=sys.stderr)
    sys.exit(2)


class CDP:
    """One page's DevTools connection: send a command and wait for its answer (events are kept aside)."""

    def __init__(self, url):
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def __call__(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def evaluate(self, expression):
        result = self("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True, userGesture=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, seconds, interval=0.1):
        """Polls `expression` until it is truthy; returns its value, or None after `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(interval)
        return None


# Every process started, each the leader of its own process group; all are ended on the way out.
processes = []


def start_server(earmark, catalog):
    server = subprocess.Popen([earmark, "serve", "--catalog", catalog, "--port", "0", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    processes.append(server)
    text = ""
    while True:   # one JSON object, maybe over several lines
        line = server.stdout.readline()
        if not line:
            raise RuntimeError("earmark serve did not start: " + server.stderr.read())
        text += line
        try:
            return server, json.loads(text)["url"]
        except json.JSONDecodeError:
            continue


def start_chromium(chromium, profile, wav):
    args = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "--remote-allow-origins=*",
            f"--user-data-dir={profile}", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required",
            "--window-size=1280,900", "about:blank"]
    browser = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    processes.append(browser)
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(port_file):
            lines = open(port_file).read().split("\n")
            if len(lines) >= 2 and lines[0].strip():
                port = int(lines[0])
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    return browser, pages[0]["webSocketDebuggerUrl"]
        if browser.poll() is not None:
            raise RuntimeError(f"chromium exited with {browser.returncode}")
        time.sleep(0.1)
    raise RuntimeError("chromium did not open its DevTools port within 60 s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--earmark", required=True, help="the earmark program")
    parser.add_argument("--catalog", required=True, help="a catalog that holds the --expect track")
    parser.add_argument("--listen-wav", required=True, help="WAV the fake microphone plays (a catalog track)")
    parser.add_argument("--file", required=True, help="a clip to identify through the file input")
    parser.add_argument("--expect", required=True, help="the title the page must show for both")
    parser.add_argument("--screenshot", default="/tmp/earmark-page.png")
    parser.add_argument("--track-screenshot", help="also save the track card (timeline) shown after the file matched")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--listen-seconds", type=float, default=10)
    args = parser.parse_args()
    if not os.path.exists(args.chromium):
        print("browser-test: chromium is not installed (tools/setup.sh installs it)", file=sys.stderr)
        return 2

    profile = tempfile.mkdtemp(prefix="earmark-chromium-")
    failures = []
    try:
        server, url = start_server(args.earmark, args.catalog)
        browser, debugger = start_chromium(args.chromium, profile, os.path.abspath(args.listen_wav))
        page = CDP(debugger)
        page("Page.enable")
        page("Runtime.enable")
        page("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
        page("Browser.grantPermissions", permissions=["audioCapture"], origin=url)
        page("Page.navigate", url=url + "/")
        if not page.wait_for("document.readyState === 'complete' && document.querySelectorAll('#tracks tr').length > 0", 30):
            raise RuntimeError("the page did not load its catalog within 30 s")

        # File: set the input's file as a person picking it would; the page posts it to /v1/match.
        document = page("DOM.getDocument")
        node = page("DOM.querySelector", nodeId=document["root"]["nodeId"], selector="#file")
        page("DOM.setFileInputFiles", files=[os.path.abspath(args.file)], nodeId=node["nodeId"])
        shown = page.wait_for("(document.querySelector('#file-match .title') || {}).textContent", 30)
        if shown == args.expect:
            print(f"browser-test: file: the page shows {shown!r}")
        else:
            text = page.evaluate("document.getElementById('file-result').textContent")
            failures.append(f"file: expected {args.expect!r}, the page shows {text!r}")

        # Track: the best match's card opens with its timeline, the matched stretch highlighted.
        if page.wait_for("!!document.querySelector('#track-card:not([hidden]) #track-timeline svg rect#highlight')", 30):
            title = page.evaluate("document.getElementById('track-title').textContent")
            lanes = page.evaluate("[...document.querySelectorAll('#track-timeline svg g.lane')].map((g) => g.dataset.lane).join(', ')")
            print(f"browser-test: track: the page shows the timeline of {title!r} with the matched stretch highlighted "
                  f"(lanes: {lanes or 'none'})")
            if title != args.expect:
                failures.append(f"track: expected the timeline of {args.expect!r}, the page shows {title!r}")
        else:
            failures.append("track: no timeline with the matched stretch highlighted within 30 s of the match")

        # Listen: the fake microphone plays the track; the page must name it within the time allowed.
        clicked = time.monotonic()
        page.evaluate("document.getElementById('listen').click()")
        current = "(document.getElementById('now').hidden ? '' : document.getElementById('now-title').textContent)"
        title = page.wait_for(f"{current} === {json.dumps(args.expect)}", args.listen_seconds) and args.expect
        took = time.monotonic() - clicked
        if title == args.expect:
            first = page.evaluate("document.getElementById('now-position').textContent")
            time.sleep(2.2)
            second = page.evaluate("document.getElementById('now-position').textContent")
            seconds = lambda t: sum(int(p) * 60 ** i for i, p in enumerate(reversed(t.split(":"))))
            if seconds(second) > seconds(first):
                print(f"browser-test: listen: the page shows {title!r} {took:.1f} s after Listen; position {first} → {second}")
            else:
                failures.append(f"listen: the position does not move ({first} → {second})")
            # The track card (still the file's match, the same track) marks where the track is heard now.
            if page.evaluate("!!document.getElementById('playhead')"):
                print("browser-test: listen: the timeline shows a playhead")
            else:
                failures.append("listen: the shown track is the one heard, but its timeline has no playhead")
        else:
            status = page.evaluate("document.getElementById('listen-status').textContent")
            failures.append(f"listen: expected {args.expect!r} within {args.listen_seconds:g} s, the page shows "
                            f"{page.evaluate(current)!r} (status: {status!r})")
        if args.track_screenshot and page.evaluate("!document.getElementById('track-card').hidden"):
            box = page.evaluate("(() => { const r = document.getElementById('track-card').getBoundingClientRect(); "
                                "return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })()")
            margin = 12
            clip = {"x": max(0, box["x"] - margin), "y": max(0, box["y"] - margin), "width": box["width"] + 2 * margin,
                    "height": box["height"] + 2 * margin, "scale": 1}
            shot = page("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)
            with open(args.track_screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            print(f"browser-test: track screenshot {args.track_screenshot}")
        shot = page("Page.captureScreenshot", format="png")
        with open(args.screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print(f"browser-test: screenshot {args.screenshot}")
    except Exception as e:  # a failure to drive the browser or the server, not a finding about the page
        print(f"browser-test: error: {e}", file=sys.stderr)
        return 2
    finally:
        for process in reversed(processes):   # the browser, then the server (which exits 0 on SIGTERM)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(process.pid, signal.SIGKILL)   # whatever is left of its group (chromium's helpers)
            except ProcessLookupError:
                pass
        shutil.rmtree(profile, ignore_errors=True)
    for failure in failures:
        print(f"browser-test: FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
