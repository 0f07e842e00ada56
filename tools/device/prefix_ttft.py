#!/usr/bin/env python3
"""Time to first token of repeated and growing prompts against a running `tandem serve` (issue #21).

  prefix_ttft.py --port P [--tokens 32768] [--turns 10] [--grow 300] [--vocab 1000] [--seed 1]

Sends /v1/completions requests with token-id prompts and max_tokens 1 (so the wall time is the time
to the first token) and prints one JSON line per request: what it was, its prompt length, the seconds
it took and the usage's cached_tokens. The cold/repeat ratio is the figure the issue asks for
(≤ 5 %); in the growing conversation each turn should read only its new tokens plus at most one
prefill chunk (checkpoints sit on the chunk grid). Standard library only.
"""
import argparse
import json
import random
import time
import urllib.request


def model_id(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as r:
        return json.loads(r.read())["data"][0]["id"]


MODEL = None


def complete(port, prompt):
    global MODEL
    MODEL = MODEL or model_id(port)
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=900) as r:
        out = json.loads(r.read())
    dt = time.perf_counter() - t
    usage = out.get("usage", {})
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return dt, usage.get("prompt_tokens", len(prompt)), cached


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--grow", type=int, default=300)
    ap.add_argument("--vocab", type=int, default=1000, help="token ids drawn from [10, vocab)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    ids = lambda n: [rng.randrange(10, a.vocab) for _ in range(n)]

    def report(what, prompt):
        dt, n, cached = complete(a.port, prompt)
        print(json.dumps({"what": what, "prompt_tokens": n, "seconds": round(dt, 4), "cached_tokens": cached}),
              flush=True)
        return dt

    complete(a.port, ids(16))  # warm-up: graphs, allocator
    base = ids(a.tokens)
    cold = report("cold", base)
    warm = report("repeat", base)
    print(json.dumps({"what": "repeat/cold", "ratio": round(warm / cold, 4)}), flush=True)
    conv = list(base)  # a conversation on top of the long prompt, a few hundred tokens a turn
    for t in range(a.turns):
        conv = conv + ids(a.grow)
        report(f"turn {t + 1}", conv)


if __name__ == "__main__":
    main()
