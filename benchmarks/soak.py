"""A bounded soak of the web app: mixed requests from several clients, then a report.

    python -m benchmarks.soak --seconds 600 --clients 4

Starts `app.py` on a free loopback port (or uses --url), sends generate /
score / scan requests with fixed seeds from each client until the time or the
request budget runs out, and prints requests served, errors, p50/p95 latency
and the server's resident memory over the run. The memory check passes when
the median of the last quarter of the run is less than --max-growth-mb above
the median of the second quarter (the first quarter holds the one-off costs:
model loads, allocator pools, first-use caches). Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from carbon_app.assets import ASSETS, REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def visitor(i: int) -> dict[str, str]:
    """Headers that make a client on loopback the app's visitor number `i`: the server takes the address in
    `X-Forwarded-For` from its own host, as from a proxy, so each such client is held to its own
    CARBON_JOBS_PER_CLIENT, as different people are."""
    return {"X-Forwarded-For": f"198.51.100.{i % 254 + 1}"}


def start_app(log_path: Path | None = None, **env_extra: str) -> tuple[subprocess.Popen, str]:
    """Start `app.py` on a free loopback port; return the process and its URL once it answers.
    Its output goes to `log_path` (a file, so a long run can never block on a full pipe)."""
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
           "GRADIO_ANALYTICS_ENABLED": "False", **env_extra}
    log = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115 (the child writes to it)
    process = subprocess.Popen([sys.executable, "app.py"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                time.sleep(1)  # the port opens a moment before the app's routes answer
                return process, f"http://127.0.0.1:{port}/"
        except OSError:
            if process.poll() is not None:
                tail = Path(log_path).read_text()[-2000:] if log_path else ""
                raise RuntimeError(f"the app exited: {tail}") from None
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("the app did not start within 180 s")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _requests(sequence: str, variant: str, i: int) -> tuple[str, tuple]:
    kind = i % 3
    if kind == 0:
        return "/generate", ("carbon-demo", "mammal", "none", "ATGGTGCA", None, 120, "", "bp", 0.9, 0, 1.0, i, 1,
                             i % 2 == 0)
    if kind == 1:
        return "/score_variant", ("carbon-demo", "none", "none", sequence, None, variant, "", 1200, False, "marginal",
                                  "none", "", 0)
    return "/scan", ("carbon-demo", "none", "none", sequence, None, 1190, 1219, 600, "marginal", "")


def soak(url: str, seconds: float, clients: int, max_requests: int, server_pid: int | None,
         max_growth_mb: float = 50.0) -> dict:
    from gradio_client import Client

    from carbon_app.core.dna import read_fasta

    examples = ASSETS / "examples"
    sequence = read_fasta(examples / "hbb.fa").sequence
    variant = json.loads((examples / "hbb.json").read_text())["variants"][0]["variant"]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(max_requests))
    deadline = time.time() + seconds
    rss_samples: list[tuple[float, float]] = []  # (seconds since start, MB)
    began_run = time.time()
    finished = threading.Event()

    def sample_memory() -> None:
        while server_pid:
            rss = rss_mb(server_pid)
            if rss is not None:
                rss_samples.append((time.time() - began_run, rss))
            if finished.wait(max(1.0, seconds / 40)):
                return

    def worker(i: int) -> None:
        client = Client(url, verbose=False, headers=visitor(i))
        while time.time() < deadline:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            api, args = _requests(sequence, variant, i)
            began = time.perf_counter()
            try:
                client.predict(*args, api_name=api)
                with lock:
                    latencies.append(time.perf_counter() - began)
            except Exception as exc:  # every failure is counted and reported, none stops the soak
                with lock:
                    errors.append(f"{api}: {type(exc).__name__}: {str(exc)[:120]}")

    sampler = threading.Thread(target=sample_memory)
    sampler.start()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    finished.set()
    sampler.join()
    if server_pid and (rss := rss_mb(server_pid)) is not None:
        rss_samples.append((time.time() - began_run, rss))
    ordered = sorted(latencies)
    elapsed = time.time() - began_run
    # RSS swings by tens of MB with the request mix, so quarters are compared by their medians
    quarters = [[mb for t, mb in rss_samples if q * elapsed / 4 <= t < (q + 1) * elapsed / 4] for q in range(4)]
    growth = (statistics.median(quarters[3]) - statistics.median(quarters[1])
              if quarters[1] and quarters[3] else None)
    return {
        "seconds": seconds, "clients": clients, "served": len(latencies), "errors": len(errors),
        "error_examples": errors[:5],
        "p50_s": statistics.median(ordered) if ordered else None,
        "p95_s": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else None,
        "server_rss_mb_start": rss_samples[0][1] if rss_samples else None,
        "server_rss_mb_second_quarter_median": statistics.median(quarters[1]) if quarters[1] else None,
        "server_rss_mb_last_quarter_median": statistics.median(quarters[3]) if quarters[3] else None,
        "server_rss_mb_peak": max((mb for _, mb in rss_samples), default=None),
        "server_rss_mb_end": rss_samples[-1][1] if rss_samples else None,
        "server_rss_mb_timeline": [[round(t), round(mb)] for t, mb in rss_samples],
        "growth_mb": growth,  # last-quarter median minus second-quarter median
        "memory_bounded": None if growth is None else growth < max_growth_mb,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max-requests", type=int, default=100_000)
    parser.add_argument("--max-growth-mb", type=float, default=50.0,
                        help="allowed growth of the server's memory between the medians of the second and "
                             "last quarters of the run")
    parser.add_argument("--url", help="an app already running on this machine (default: start one)")
    args = parser.parse_args(argv)
    try:
        process, url = (None, args.url) if args.url else start_app()
    except RuntimeError as exc:
        raise SystemExit(f"error: {exc}") from None
    try:
        report = soak(url, args.seconds, args.clients, args.max_requests, process.pid if process else None,
                      args.max_growth_mb)
    finally:
        if process:
            process.terminate()
            process.wait(timeout=30)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
