#!/usr/bin/env python3
"""Time to first token on a second replica: a ~4,000-token shared prefix from the Redis tier vs the disk
tier vs computing it (docs/benchmarks-history.md, "Replicas sharing prefixes through Redis (issue 17)").

Starts a redis-server (loopback, free port, no persistence) and four `kvstash serve` processes:
  A        --cache-redis R --cache-dir D   computes each prompt once and writes both tiers
  B_redis  --cache-redis R                 the replica that reuses through Redis
  B_disk   --cache-dir D                   the same through the disk tier (same machine, same directory)
  B_none   (no tier)                       computes the whole prompt
For each of --rounds distinct prompts (a ~4,000-token system prompt + a short question): A answers it,
then the three B servers answer it in rotating order (shared machine: alternation spreads the load),
streamed, measuring the time to the first streamed token. Each B sees each prompt once (no RAM hit).
Also the read throughput of each tier: bytes the tier handed back (/metrics) / the extra TTFT over an
all-RAM hit would be the pure tier time; we report bytes / TTFT, a lower bound that includes the
remaining prompt tokens' evaluation. Prints JSON with the medians.

  python3 bench/redis_tier.py --build build --rounds 5
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ["river", "mountain", "library", "orange", "signal", "harbor", "winter", "copper", "garden",
         "lantern", "meadow", "engine", "silver", "canyon"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(cli, model, threads, extra):
    p = subprocess.Popen([cli, "serve", "-m", model, "-t", str(threads), "--host", "127.0.0.1", "--port", "0",
                          "--ctx", "8192"] + extra, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    port = int(line.split("http://127.0.0.1:")[1].split()[0])
    return p, f"http://127.0.0.1:{port}"


def post(url, body, stream=False):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as res:
        if not stream:
            return json.loads(res.read()), time.perf_counter() - start
        for raw in res:
            line = raw.decode().strip()
            if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                return None, time.perf_counter() - start
        return None, time.perf_counter() - start


def metric(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def prompt(seed, words):
    body = " ".join(WORDS[(i * 7 + seed * 3 + i // 5) % len(WORDS)] for i in range(words))
    return {"messages": [{"role": "system", "content": f"You are assistant {seed}. Notes: {body}."},
                         {"role": "user", "content": "Say hello."}],
            "max_tokens": 4, "temperature": 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--words", type=int, default=3900, help="words of the system prompt (~1 token each)")
    args = ap.parse_args()
    cli = os.path.join(args.build, "kvstash")
    work = tempfile.mkdtemp(prefix="kvstash_redis_bench_")
    rport = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", work, "--maxmemory", "4gb",
                              "--maxmemory-policy", "allkeys-lru"], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{rport}"
    procs = []
    try:
        time.sleep(0.5)
        disk = os.path.join(work, "cache")
        a = start_serve(cli, args.model, args.threads, ["--cache-redis", url, "--cache-dir", disk])
        servers = {"redis": start_serve(cli, args.model, args.threads, ["--cache-redis", url]),
                   "disk": start_serve(cli, args.model, args.threads, ["--cache-dir", disk]),
                   "none": start_serve(cli, args.model, args.threads, [])}
        procs = [a[0]] + [s[0] for s in servers.values()]
        ttft = {k: [] for k in servers}
        throughput = {"redis": [], "disk": []}
        prompt_tokens = 0
        names = list(servers)
        for r in range(args.rounds):
            body = prompt(r, args.words)
            reply, _ = post(a[1] + "/v1/chat/completions", body)
            prompt_tokens = reply["usage"]["prompt_tokens"]
            deadline = time.time() + 60  # write-behind: wait until Redis has the prompt's blocks
            while metric(a[1], "kvstash_cache_redis_blocks_written_total") < (r + 1) * (prompt_tokens // 32) - 1 \
                    and time.time() < deadline:
                time.sleep(0.05)
            order = names[r % 3:] + names[:r % 3]
            if order[0] == "disk":  # block bytes come from the Redis replica's counters: read it first
                order.remove("redis")
                order.insert(0, "redis")
            for name in order:
                base = servers[name][1]
                counter = {"redis": "kvstash_cache_redis_hits_total", "disk": "kvstash_cache_disk_hits_total",
                           "none": None}[name]
                before = metric(base, counter) if counter else 0
                _, t = post(base + "/v1/chat/completions", dict(body, stream=True), stream=True)
                ttft[name].append(t)
                if counter:
                    # Both tiers hand back the same bytes per block (a block file: header + K + V).
                    block_bytes = metric(servers["redis"][1], "kvstash_cache_redis_bytes_read_total") / max(
                        1.0, metric(servers["redis"][1], "kvstash_cache_redis_hits_total"))
                    throughput[name].append((metric(base, counter) - before) * block_bytes / t / 1e6)
        out = {"prompt_tokens": prompt_tokens, "rounds": args.rounds, "threads": args.threads,
               "ttft_s_median": {k: round(statistics.median(v), 3) for k, v in ttft.items()},
               "ttft_s_all": {k: [round(x, 3) for x in v] for k, v in ttft.items()},
               "tier_MB_per_s_over_ttft_median": {k: round(statistics.median(v), 1) for k, v in throughput.items()}}
        print(json.dumps(out, indent=2))
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        redis.kill()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
