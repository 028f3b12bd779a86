#!/usr/bin/env python3
"""Load test for `kvstash serve` (and the same against llama.cpp's server, llama-cpp-python[server]).

Bounded and loopback only. Starts the server itself on a free 127.0.0.1 port, then runs:
  1. load:       CLIENTS concurrent clients x REQUESTS requests each, chat completions sharing one long
                 system prompt (different user questions, half streamed): counts errors, samples the server's
                 RSS (/proc/PID/status VmRSS) every 0.2 s, reports requests/s and the prompt-cache figures.
  2. throughput: aggregate decode tok/s with 1 stream and with 8 concurrent streams (each TOKENS tokens,
                 end-of-text banned so every stream runs full length): sum of tokens / (last token time -
                 first token time over all streams), and the ratio 8 vs 1.
Only the standard library is used, so any python3 runs it.

  python3 bench/server_load.py --server kvstash --kvstash build/kvstash --threads 2
  /work/venv-bench/bin/python bench/server_load.py --server llama --threads 2
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SYSTEM_PROMPT = ("You are the support assistant of a small bookshop. " +
                 "Answer politely, in one short sentence, and never invent opening hours, prices or titles. " * 24).strip()
# The same sampling for both servers (llama.cpp's defaults), sent explicitly.
SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
QUESTIONS = ["Do you sell maps?", "Can I order a book?", "Are you open on Sunday?", "Do you buy used books?",
             "Is there a reading club?", "Can I pay by card?", "Do you ship abroad?", "Do you have gift cards?"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def request(port, path, body, stream, timeout=600):
    """POSTs JSON; returns (status, [event dicts] for a stream or the body dict, [arrival times of events])."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    if not stream or res.status != 200:
        data = res.read()
        conn.close()
        try:
            return res.status, json.loads(data), []
        except ValueError:
            return res.status, {"raw": data[:200].decode(errors="replace")}, []
    events, times = [], []
    for raw in res:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        events.append(json.loads(line[6:]))
        times.append(time.perf_counter())
    conn.close()
    return res.status, events, times


class Server:
    def __init__(self, args):
        self.port = free_port()
        if args.server == "kvstash":
            cmd = [args.kvstash, "serve", "-m", args.model, "--port", str(self.port), "-t", str(args.threads),
                   "--parallel", str(args.parallel), "--queue", "256", "--ctx", str(args.ctx)]
        else:
            # --interrupt_requests False: by default a new request cuts the running stream short; queue instead.
            cmd = [args.llama_python, "-m", "llama_cpp.server", "--model", args.model, "--port", str(self.port),
                   "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads), "--n_ctx", str(args.ctx),
                   "--interrupt_requests", "False"]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/v1/models")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        sys.exit(f"server did not come up: {' '.join(cmd)}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def load_phase(server, args, eos_ban):
    rss = [rss_mib(server.proc.pid)]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            rss.append(rss_mib(server.proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    errors, done = [], [0]
    lock = threading.Lock()

    def client(c):
        for r in range(args.requests):
            body = {"model": "m", "max_tokens": args.load_tokens, "seed": c * 1000 + r, **SAMPLING,
                    "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                                 {"role": "user", "content": QUESTIONS[(c + r) % len(QUESTIONS)]}]}
            stream = (c + r) % 2 == 1
            if stream:
                body["stream"] = True
            started = time.perf_counter()
            try:
                status, payload, _ = request(server.port, "/v1/chat/completions", body, stream)
                # A complete answer: a finish_reason (a stream cut short by the server has none).
                if stream:
                    finishes = [c.get("finish_reason") for e in payload for c in e.get("choices", [])]
                    ok = status == 200 and any(finishes)
                else:
                    ok = status == 200 and payload.get("choices") and payload["choices"][0].get("finish_reason")
                if not ok:
                    with lock:
                        errors.append(f"{status}: {str(payload)[:200]}")
            except Exception as e:  # noqa: BLE001 - every failure is counted
                with lock:
                    errors.append(f"{e!r} (stream={stream}, after {time.perf_counter() - started:.1f} s)")
            with lock:
                done[0] += 1

    start = time.perf_counter()
    with cf.ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(client, range(args.clients)))
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    return {"requests": done[0], "errors": len(errors), "first_errors": errors[:3], "seconds": round(seconds, 2),
            "requests_per_s": round(done[0] / seconds, 2), "rss_start_mib": round(rss[0], 1),
            "rss_max_mib": round(max(rss), 1), "rss_end_mib": round(rss[-1], 1)}


def throughput(server, args, streams, eos_ban):
    def one(i):
        body = {"model": "m", "prompt": f"Story number {i}: Once upon a time", "max_tokens": args.tokens,
                "seed": i, "stream": True, "logit_bias": eos_ban, **SAMPLING}
        status, events, times = request(server.port, "/v1/completions", body, True)
        assert status == 200, events
        n = sum(1 for e in events if e.get("choices") and e["choices"][0].get("text"))
        assert n >= args.tokens * 0.9, f"stream {i}: {n} pieces for {args.tokens} tokens (cut short?)"
        return n, times

    with cf.ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(one, range(streams)))
    tokens = sum(n for n, _ in results)
    first = min(t[0] for _, t in results if t)
    last = max(t[-1] for _, t in results if t)
    return {"streams": streams, "tokens": tokens, "seconds": round(last - first, 2),
            "tok_per_s": round(tokens / (last - first), 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", choices=["kvstash", "llama"], default="kvstash")
    p.add_argument("--kvstash", default=os.path.join(ROOT, "build", "kvstash"), help="the kvstash binary")
    p.add_argument("--llama-python", default="/work/venv-bench/bin/python", help="python with llama-cpp-python[server]")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parallel", type=int, default=8, help="kvstash --parallel")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--requests", type=int, default=20, help="requests per client")
    p.add_argument("--load-tokens", type=int, default=16, help="max_tokens of each load-phase request")
    p.add_argument("--tokens", type=int, default=64, help="tokens per stream in the throughput phase")
    p.add_argument("--skip-load", action="store_true")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()

    server = Server(args)
    # SmolLM2's end-of-generation tokens (<|endoftext|> 0, <|im_end|> 2): banned in the throughput phase.
    eos_ban = {"0": -100, "2": -100}
    try:
        results = {"server": args.server, "command": " ".join(server.cmd), "threads": args.threads}
        if not args.skip_load:
            results["load"] = load_phase(server, args, eos_ban)
            print("load:", json.dumps(results["load"]), flush=True)
        results["one_stream"] = throughput(server, args, 1, eos_ban)
        print("1 stream:", json.dumps(results["one_stream"]), flush=True)
        results["eight_streams"] = throughput(server, args, 8, eos_ban)
        print("8 streams:", json.dumps(results["eight_streams"]), flush=True)
        results["ratio_8_vs_1"] = round(results["eight_streams"]["tok_per_s"] / results["one_stream"]["tok_per_s"], 2)
        print("aggregate decode ratio 8 vs 1:", results["ratio_8_vs_1"])
        if args.server == "kvstash":
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            conn.request("GET", "/metrics")
            metrics = conn.getresponse().read().decode()
            keep = re.findall(r"^(kvstash_(?:prompt_cache_hit_ratio|prompt_tokens_\w+|batch_\w+|cache_bytes\{[^}]*\}) \S+)$",
                              metrics, re.M)
            results["metrics"] = keep
            print("\n".join(keep))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        server.stop()
    if results.get("load", {}).get("errors"):
        sys.exit(1)


if __name__ == "__main__":
    main()
