#!/usr/bin/env python3
"""Load client for tools/serve-bench.sh: drives a running `earmark serve` on loopback.

1. POST /v1/match with real 10-s clips at 1, 8 and 32 concurrent clients (the request count split
   between the three; each level also stops after --max-seconds): matches/s, p50/p99 latency,
   errors (anything but a 200 naming the clip's track), the server's CPU per match, and its RSS
   before and after each level.
2. N WebSocket listeners on /v1/listen at once, each streaming real audio (16 kHz mono s16le) at real
   time: the server's CPU per stream (from /proc/PID/stat) and time to the first match.

Standard library only (http.client, threads, a minimal WebSocket client). Prints a summary table and,
with --json, writes the figures to a file.
"""
import argparse
import base64
import http.client
import json
import os
import socket
import statistics
import struct
import sys
import threading
import time
import urllib.parse

CLK_TCK = os.sysconf("SC_CLK_TCK")


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command: state is field 3, utime 14 and stime 15 (1-based, as proc(5) counts).
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def track_ids(port):
    """basename of each track's source file -> track id."""
    ids, offset = {}, 0
    while True:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", f"/v1/tracks?limit=200&offset={offset}")
        body = json.loads(c.getresponse().read())
        c.close()
        for t in body["tracks"]:
            ids[os.path.basename(t.get("sourcePath", ""))] = t["id"]
        if body.get("nextOffset") is None:
            return ids
        offset = body["nextOffset"]


# MARK: POST /v1/match

def match_level(port, clips, clients, count, max_seconds):
    """`count` matches from `clients` threads, each on its own keep-alive connection."""
    lock = threading.Lock()
    state = {"next": 0, "latencies": [], "errors": 0, "busy": 0, "wrong": 0, "first_error": None}
    deadline = time.monotonic() + max_seconds

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                i = state["next"]
                if i >= count or time.monotonic() > deadline:
                    break
                state["next"] += 1
            name, data, expected = clips[i % len(clips)]
            start = time.monotonic()
            try:
                conn.request("POST", "/v1/match?name=" + urllib.parse.quote(name, safe=""), body=data, headers={"Content-Type": "audio/mpeg"})
                response = conn.getresponse()
                body = response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                status, body = -1, str(e).encode()
            elapsed = time.monotonic() - start
            with lock:
                if status == 200:
                    state["latencies"].append(elapsed)
                    matches = json.loads(body).get("matches", [])
                    if not matches or matches[0]["track"]["id"] != expected:
                        state["wrong"] += 1
                else:
                    state["errors"] += 1
                    if status == 503:
                        state["busy"] += 1
                    if state["first_error"] is None:
                        state["first_error"] = f"{status}: {body[:200]!r}"
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - began
    lat = state["latencies"]
    return {
        "clients": clients, "requests": state["next"], "ok": len(lat), "seconds": wall,
        "matchesPerSecond": len(lat) / wall if wall > 0 else 0,
        "p50ms": percentile(lat, 50) * 1000, "p99ms": percentile(lat, 99) * 1000,
        "errors": state["errors"], "busy503": state["busy"], "wrongOrNoMatch": state["wrong"],
        "firstError": state["first_error"],
    }


# MARK: GET /v1/listen

class WebSocket:
    """Just enough of RFC 6455 for a client: the handshake, masked frames out, unfragmented frames in."""

    def __init__(self, port, path):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise OSError("closed during the handshake")
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            raise OSError("upgrade refused: " + status.decode(errors="replace"))
        self.send_lock = threading.Lock()

    def send(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if n < 4096 else self._mask(payload, mask)
        with self.send_lock:
            self.sock.sendall(header + mask + masked)

    @staticmethod
    def _mask(payload, mask):
        m = int.from_bytes(mask * (len(payload) // 4 + 1), "little")
        return (int.from_bytes(payload, "little") ^ (m & ((1 << (8 * len(payload))) - 1))).to_bytes(len(payload), "little")

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def receive(self):
        """(opcode, payload) of the next frame; (8, code) for a close."""
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8))[0]
        return b0 & 0x0F, self._read(n)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def listener(port, pcm, expected, seconds, result):
    """Streams `seconds` of `pcm` (16 kHz mono s16le) in 0.1-s messages at real time, then {"end": true}."""
    try:
        ws = WebSocket(port, "/v1/listen")
    except OSError as e:
        result["error"] = str(e)
        return
    events = []

    def read():
        try:
            while True:
                opcode, payload = ws.receive()
                if opcode == 1:
                    event = json.loads(payload)
                    events.append((time.monotonic(), event))
                elif opcode == 8:
                    result["close"] = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                    return
        except (OSError, EOFError, ValueError) as e:
            result.setdefault("readError", str(e))

    reader = threading.Thread(target=read)
    reader.start()
    ws.send(1, json.dumps({"format": "s16le", "sampleRate": 16000, "channels": 1}).encode())
    chunk = 3200  # 0.1 s
    total = min(len(pcm), int(seconds * 32000))
    began = time.monotonic()
    try:
        for k, offset in enumerate(range(0, total, chunk)):
            ws.send(2, pcm[offset:offset + chunk])
            pause = began + (k + 1) * 0.1 - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        ws.send(1, b'{"end":true}')
    except OSError as e:
        result["error"] = "send: " + str(e)
    reader.join(timeout=30)
    ws.close()
    result["events"] = len(events)
    for at, event in events:
        if event.get("event") == "match":
            result["firstMatch"] = at - began
            result["right"] = event.get("track", {}).get("id") == expected
            break
    result["errorEvents"] = sum(1 for _, e in events if e.get("event") == "error")
    result["ended"] = any(e.get("event") == "end" for _, e in events)


def listen_phase(port, pid, streams, seconds, pcms):
    results = [{} for _ in range(streams)]
    threads = []
    for i in range(streams):
        pcm, expected = pcms[i % len(pcms)]
        threads.append(threading.Thread(target=listener, args=(port, pcm, expected, seconds, results[i])))
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    for t in threads:
        t.start()
        time.sleep(0.02)  # spread the starts over a second
    peak = 0
    while any(t.is_alive() for t in threads):
        peak = max(peak, live_streams(port))
        time.sleep(1)
    cpu, wall = cpu_seconds(pid) - cpu0, time.monotonic() - wall0
    firsts = [r["firstMatch"] for r in results if "firstMatch" in r]
    errors = sum(1 for r in results if "error" in r or r.get("errorEvents") or not r.get("ended") or r.get("close") not in (1000, None))
    return {
        "streams": streams, "seconds": wall, "serverCpuSeconds": cpu,
        "cpuPerStreamPercent": 100 * cpu / wall / streams, "serverCpuPercent": 100 * cpu / wall,
        "peakStreams": peak, "matched": len(firsts), "wrongTrack": sum(1 for r in results if r.get("right") is False),
        "firstMatchMedianS": statistics.median(firsts) if firsts else float("nan"),
        "firstMatchMaxS": max(firsts) if firsts else float("nan"), "errors": errors,
        "firstError": next((r.get("error") or r.get("readError") for r in results if r.get("error") or r.get("readError")), None),
    }


def live_streams(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        for line in text.splitlines():
            if line.startswith("earmark_listen_streams "):
                return int(float(line.split()[1]))
    except (OSError, ValueError):
        pass
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pid", type=int, required=True, help="the server's process id (RSS and CPU)")
    p.add_argument("--clips", required=True, help="folder of MP3 clips named TRACKFILE@START.mp3")
    p.add_argument("--pcm", required=True, help="folder of 16 kHz mono s16le files named TRACKFILE.raw")
    p.add_argument("--requests", type=int, default=10000, help="matches in all, split between the levels")
    p.add_argument("--levels", default="1,8,32")
    p.add_argument("--max-seconds", type=float, default=180, help="longest time per level")
    p.add_argument("--streams", type=int, default=50)
    p.add_argument("--stream-seconds", type=float, default=30)
    p.add_argument("--json")
    a = p.parse_args()

    ids = track_ids(a.port)
    clips = []
    for name in sorted(os.listdir(a.clips)):
        source = name.rsplit("@", 1)[0]
        with open(os.path.join(a.clips, name), "rb") as f:
            clips.append((name, f.read(), ids[source]))
    pcms = []
    for name in sorted(os.listdir(a.pcm)):
        with open(os.path.join(a.pcm, name), "rb") as f:
            pcms.append((f.read(), ids[name[:-len(".raw")]]))

    levels = [int(x) for x in a.levels.split(",")]
    match_level(a.port, clips, 2, len(clips) * 2, 60)  # warm-up: every clip twice
    # ... and two matches per client at the highest level, so that "before" is a server that has already
    # served that many at once (its peak of buffers in flight and its allocator's per-thread arenas): the
    # RSS growth over the run is then growth, not the first burst of 32 concurrent requests.
    rss_warm = rss_mb(a.pid)
    match_level(a.port, clips, max(levels), 2 * max(levels), 60)
    rss_before = rss_mb(a.pid)
    rows = []
    for i, clients in enumerate(levels):
        count = a.requests // len(levels) + (a.requests % len(levels) if i == len(levels) - 1 else 0)
        cpu0 = cpu_seconds(a.pid)
        rows.append(match_level(a.port, clips, clients, count, a.max_seconds))
        rows[-1]["rssAfterMB"] = rss_mb(a.pid)
        # Server CPU per answered match: steadier than matches/s on a machine shared with other work.
        rows[-1]["serverCpuMsPerMatch"] = 1000 * (cpu_seconds(a.pid) - cpu0) / max(1, rows[-1]["ok"])
        print(f"  {clients} clients: {rows[-1]['ok']} matches in {rows[-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
    rss_after = rss_mb(a.pid)
    listen = listen_phase(a.port, a.pid, a.streams, a.stream_seconds, pcms) if a.streams > 0 else None

    print()
    print(f"POST /v1/match, {len(clips)} real 10-s clips (MP3 64 kbit/s, pink noise 10 dB SNR), keep-alive connections")
    print(f"{'clients':>7} {'requests':>8} {'matches/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} {'503':>4} {'wrong':>5} {'RSS after':>9} {'CPU/match':>9}")
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['matchesPerSecond']:>9.1f} {r['p50ms']:>7.1f} {r['p99ms']:>7.1f} "
              f"{r['errors']:>6} {r['busy503']:>4} {r['wrongOrNoMatch']:>5} {r['rssAfterMB']:>6.1f} MB {r['serverCpuMsPerMatch']:>6.1f} ms")
        if r["firstError"]:
            print(f"        first error: {r['firstError']}")
    total = sum(r["requests"] for r in rows)
    growth = 100 * (rss_after - rss_before) / rss_before
    print(f"server RSS: {rss_warm:.1f} MB after the first warm-up, {rss_before:.1f} MB after {2 * max(levels)} matches at "
          f"{max(levels)} clients, {rss_after:.1f} MB after {total} requests ({growth:+.1f} %)")
    if listen:
        print()
        print(f"GET /v1/listen: {listen['streams']} WebSocket listeners at once, each {a.stream_seconds:.0f} s of real music, "
              "16 kHz mono s16le at real time")
        print(f"  peak streams (earmark_listen_streams): {listen['peakStreams']}")
        print(f"  server CPU: {listen['serverCpuPercent']:.0f} % of a core in all, {listen['cpuPerStreamPercent']:.2f} % per stream")
        print(f"  first match: {listen['matched']}/{listen['streams']} streams, median {listen['firstMatchMedianS']:.2f} s, "
              f"max {listen['firstMatchMaxS']:.2f} s; wrong track {listen['wrongTrack']}; errors {listen['errors']}")
        if listen["firstError"]:
            print(f"  first error: {listen['firstError']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"match": rows, "rssWarmMB": rss_warm, "rssBeforeMB": rss_before, "rssAfterMB": rss_after, "listen": listen}, f, indent=1)
    failed = any(r["errors"] or r["wrongOrNoMatch"] for r in rows) or (listen and listen["errors"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
