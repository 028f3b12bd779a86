#!/usr/bin/env python3
"""Soak test of `kvstash serve` (issue 19 item 8): continuous mixed load for a while, RSS sampled.

    .venv/bin/python tests/reliability/soak.py [--build build] [--minutes 30] [--clients 6]
                                               [--warmup-minutes 5] [--rss-tolerance-mib 48]

Starts the real CLI (`BUILD/kvstash serve --port 0`) on the default model (models/SmolLM2*.gguf, or
$KVSTASH_MODEL) with a state directory and a prefix-cache directory in a temporary folder, then runs
CLIENTS threads, each looping over a random mix of:

    completion      POST /v1/completions, a prompt from a small set (prefix-cache hits) or a unique one (misses)
    chat_stream     POST /v1/chat/completions with "stream": true, read to [DONE]
    disconnect      a streaming request dropped after its first chunk (the client's fault, by design)
    state_cycle     POST /v1/states -> continue from it -> GET .../file -> DELETE -> PUT .../file -> DELETE
    malformed       a request the server must refuse with a 4xx (the client's fault, counted as expected)
    health          GET /health and /metrics

An error is any answer other than the expected one (a 5xx, a wrong 4xx, a broken stream, a refused
connection) and any server exit. The server's RSS (/proc/PID/status VmRSS) is sampled every 10 s; after
--warmup-minutes the samples must stay within --rss-tolerance-mib of the first post-warm-up sample's
median window (the median of the first 6 samples after warm-up against the median of the last 6, and no
sample above the first window's maximum plus the tolerance). Exit 0 when there was no error and RSS stayed
flat, 1 otherwise. Prints counts per operation and the RSS curve (a table and a sparkline); --markdown FILE
also writes them as Markdown.
"""
import argparse
import glob
import http.client
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_PROMPTS = [
    "The history of the printing press begins",
    "Write a short poem about the sea.",
    "Once upon a time, in a quiet village,",
    "List three facts about the moon:",
]


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = {}
        self.errors = {}
        self.error_samples = []

    def add(self, op, ok, detail=""):
        with self.lock:
            table = self.ok if ok else self.errors
            table[op] = table.get(op, 0) + 1
            if not ok:
                print(f"soak: error: {op}: {detail}", flush=True)
                if len(self.error_samples) < 20:
                    self.error_samples.append(f"{op}: {detail}")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


class Client:
    def __init__(self, port, counts, rng, worker):
        self.port, self.counts, self.rng, self.worker = port, counts, rng, worker
        self.serial = 0

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, raw=None):
        c = self.conn()
        try:
            headers = {}
            data = raw
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            c.request(method, path, body=data, headers=headers)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def expect(self, op, status, want, payload=b""):
        ok = status in want
        self.counts.add(op, ok, f"HTTP {status}: {payload[:200]!r}")
        return ok

    def prompt(self):
        if self.rng.random() < 0.6:
            return self.rng.choice(SHARED_PROMPTS)  # a prefix-cache hit after the first time
        self.serial += 1
        return f"Client {self.worker} request {self.serial} {self.rng.random():.6f}: tell me a story"

    def completion(self):
        body = {"prompt": self.prompt(), "max_tokens": self.rng.randint(1, 12), "temperature": 0}
        status, payload = self.request("POST", "/v1/completions", body)
        if self.expect("completion", status, {200}, payload):
            json.loads(payload)["choices"][0]["text"]

    def chat_stream(self, drop_after_first=False):
        body = {"messages": [{"role": "user", "content": self.prompt()}], "max_tokens": 16, "stream": True}
        c = self.conn()
        op = "disconnect" if drop_after_first else "chat_stream"
        try:
            c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                self.expect(op, r.status, {200}, r.read())
                return
            done = False
            while True:
                line = r.fp.readline()
                if not line:
                    break
                if drop_after_first and line.startswith(b"data: "):
                    r.close()  # the client goes away mid-stream (with Connection: close, r holds the socket)
                    c.close()
                    self.counts.add(op, True)
                    return
                if line.strip() == b"data: [DONE]":
                    done = True
                    break
            self.counts.add(op, done, "stream ended without [DONE]")
        finally:
            c.close()

    def state_cycle(self):
        name = f"soak{self.worker}x{self.serial}"
        self.serial += 1
        status, payload = self.request("POST", "/v1/states", {"name": name, "prompt": self.prompt()})
        if not self.expect("state_create", status, {201}, payload):
            return
        status, payload = self.request("POST", "/v1/completions", {"state": name, "prompt": " and then", "max_tokens": 4})
        self.expect("state_continue", status, {200}, payload)
        status, data = self.request("GET", f"/v1/states/{name}/file")
        if not self.expect("state_download", status, {200}, data):
            return
        status, payload = self.request("POST", "/v1/states", {"name": name, "prompt": "again"})
        self.expect("state_exists_409", status, {409}, payload)
        status, payload = self.request("DELETE", f"/v1/states/{name}")
        self.expect("state_delete", status, {200, 204}, payload)
        status, payload = self.request("PUT", f"/v1/states/{name}/file", raw=data)
        self.expect("state_upload", status, {200, 201}, payload)
        status, payload = self.request("DELETE", f"/v1/states/{name}")
        self.expect("state_delete", status, {200, 204}, payload)

    def malformed(self):
        cases = [
            ("POST", "/v1/completions", b"{oops", {400}),
            ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": null}]}', {400}),
            ("GET", "/v1/states/no-such-state/file", None, {404}),
            ("POST", "/v1/completions", b'{"prompt": "x", "max_tokens": -1}', {400}),
        ]
        method, path, raw, want = self.rng.choice(cases)
        status, payload = self.request(method, path, raw=raw)
        self.expect("malformed_4xx", status, want, payload)

    def health(self):
        status, payload = self.request("GET", "/health")
        self.expect("health", status, {200}, payload)
        status, payload = self.request("GET", "/metrics")
        self.expect("health", status, {200}, payload)

    def step(self):
        r = self.rng.random()
        if r < 0.35:
            self.completion()
        elif r < 0.55:
            self.chat_stream()
        elif r < 0.65:
            self.chat_stream(drop_after_first=True)
        elif r < 0.80:
            self.state_cycle()
        elif r < 0.90:
            self.malformed()
        else:
            self.health()


def sparkline(values):
    bars = "▁▂▃▄▅▆▇█"
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1
    return "".join(bars[min(7, int((v - lo) / span * 8))] for v in values)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.environ.get("KVSTASH_MODEL"))
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--warmup-minutes", type=float, default=None, help="default: a sixth of --minutes")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--sample-seconds", type=float, default=10)
    ap.add_argument("--rss-tolerance-mib", type=float, default=48)
    ap.add_argument("--threads", type=int, default=2, help="the server's -t")
    ap.add_argument("--markdown", help="also write the counts and the RSS curve here")
    args = ap.parse_args()
    warmup = args.warmup_minutes if args.warmup_minutes is not None else args.minutes / 6
    model = args.model or (sorted(glob.glob(os.path.join(ROOT, "models", "SmolLM2*.gguf"))) or [None])[0]
    if not model or not os.path.exists(model):
        print("soak.py: SKIP: no default model (models/SmolLM2*.gguf or $KVSTASH_MODEL)")
        return 0
    cli = os.path.join(args.build, "kvstash")
    work = tempfile.mkdtemp(prefix="kvstash-soak-")
    cmd = [cli, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", str(args.threads),
           "--state-dir", os.path.join(work, "states"), "--cache-dir", os.path.join(work, "cache"), "--cache-ram", "64"]
    os.makedirs(os.path.join(work, "states"))
    out = open(os.path.join(work, "serve.out"), "w+")
    server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    port = None
    for _ in range(600):
        out.seek(0)
        found = re.search(r"http://127\.0\.0\.1:(\d+)", out.read())
        port = int(found.group(1)) if found else None
        if port:
            break
        if server.poll() is not None:
            break
        time.sleep(0.1)
    if not port:
        out.seek(0)
        print("soak.py: the server did not start:\n" + out.read())
        server.kill()
        return 1

    counts = Counts()
    stop = threading.Event()

    def worker(i):
        client = Client(port, counts, random.Random(1000 + i), i)
        while not stop.is_set():
            try:
                client.step()
            except Exception as e:  # a broken connection or answer: the server's fault here
                counts.add("exception", False, repr(e))
                time.sleep(0.5)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.clients)]
    start = time.time()
    for t in threads:
        t.start()
    samples = []  # (seconds, RSS MiB, threads)
    end = start + args.minutes * 60
    while time.time() < end and server.poll() is None:
        samples.append((time.time() - start, rss_kib(server.pid) / 1024, threads_of(server.pid)))
        print(f"soak: {samples[-1][0]:7.0f} s  RSS {samples[-1][1]:7.1f} MiB  threads {samples[-1][2]:4d}  "
              f"ok {sum(counts.ok.values())}  errors {sum(counts.errors.values())}", flush=True)
        time.sleep(min(args.sample_seconds, max(0.0, end - time.time())))
    stop.set()
    for t in threads:
        t.join(timeout=180)
    exited = server.poll()
    if exited is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    else:
        counts.add("server_alive", False, f"the server exited with {exited}")

    # RSS after warm-up: the median of the first window against the median of the last, and the peak.
    after = [s for s in samples if s[0] >= warmup * 60]
    verdict, flat = "not enough samples after warm-up", True
    if len(after) >= 12:
        first = [s[1] for s in after[:6]]
        last = [s[1] for s in after[-6:]]
        growth = statistics.median(last) - statistics.median(first)
        peak_over = max(s[1] for s in after) - max(first)
        flat = growth <= args.rss_tolerance_mib and peak_over <= args.rss_tolerance_mib
        verdict = (f"median RSS {statistics.median(first):.1f} MiB -> {statistics.median(last):.1f} MiB after warm-up "
                   f"({growth:+.1f} MiB), peak {peak_over:+.1f} MiB over the first window's maximum; tolerance "
                   f"{args.rss_tolerance_mib:g} MiB: {'flat' if flat else 'GROWING'}")
    errors = sum(counts.errors.values())
    lines = [f"Soak: {args.minutes:g} min, {args.clients} clients, warm-up {warmup:g} min, model {os.path.basename(model)}",
             "", "| operation | ok | errors |", "|---|---:|---:|"]
    for op in sorted(set(counts.ok) | set(counts.errors)):
        lines.append(f"| {op} | {counts.ok.get(op, 0)} | {counts.errors.get(op, 0)} |")
    lines.append(f"| total | {sum(counts.ok.values())} | {errors} |")
    step = max(1, len(samples) // 30)
    lines += ["", f"RSS every {args.sample_seconds * step:g} s (MiB): `{sparkline([s[1] for s in samples[::step]])}`", "",
              "| t (s) | RSS (MiB) | threads |", "|---:|---:|---:|"]
    for s in samples[::step]:
        lines.append(f"| {s[0]:.0f} | {s[1]:.1f} | {s[2]} |")
    lines += ["", verdict]
    if counts.error_samples:
        lines += ["", "First errors:"] + [f"- {e}" for e in counts.error_samples]
    report = "\n".join(lines)
    print(report)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report + "\n")
    subprocess.run(["rm", "-rf", work])
    return 0 if errors == 0 and flat else 1


if __name__ == "__main__":
    sys.exit(main())
