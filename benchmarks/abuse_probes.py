"""The server's memory and time under the requests that once took the host, before and after their bounds.

    python benchmarks/abuse_probes.py [--json out.json]

Starts the app on a loopback port, reads its resident memory at idle, then sends each probe (the page's API,
through gradio_client) while a watchdog samples the server's memory every 50 ms and kills it past
--kill-above-mb over idle or --timeout seconds (a probe that would take the host). The command-line probes run
`python -m carbon_app` the same way. Prints a table: each probe's wall time, peak memory over idle and outcome.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.soak import rss_mb, start_app  # noqa: E402

HUGE = 10 * 2**20  # the 10 MB field of the original probe


class Watch:
    """Samples a process's memory while a probe runs; kills it past a bound."""

    def __init__(self, pid: int, idle_mb: float, kill_above_mb: float):
        self.pid, self.idle, self.limit = pid, idle_mb, kill_above_mb
        self.peak, self.killed, self._done = idle_mb, False, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.wait(0.05):
            rss = rss_mb(self.pid)
            if rss is None:
                return
            self.peak = max(self.peak, rss)
            if rss - self.idle > self.limit:
                self.killed = True
                subprocess.run(["kill", "-9", str(self.pid)], check=False)
                return

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._done.set()
        self._thread.join()


def design_args(**fields) -> dict:
    base = dict(model="carbon-demo", species="none", region="none", prompt="", upload=None, n_bases=60, mask="",
                mode="bp", temperature=0.9, top_k=0, top_p=1.0, seed="1", samples=1, speculative=False)
    return {**base, **fields}


WEB_PROBES = {
    "design, max_homopolymer=10^9, 60 bases": design_args(max_homopolymer=10**9),
    "design, max_homopolymer=10^6, 60 bases": design_args(max_homopolymer=10**6),
    "design, avoid = 10 MB of sites": design_args(avoid="GAATTC," * (HUGE // 7)),
    "design, avoid = 1.9 MB of sites": design_args(avoid="GAATTC," * (1_900_000 // 7)),
    "design, prompt = 10 MB of bases": design_args(prompt="ACGT" * (HUGE // 4)),
    "design, mask = 10 MB": design_args(mask="N" * HUGE, n_bases=None),
}
CLI_PROBES = {
    "CLI generate --max-homopolymer 1000000000": ["generate", "--bases", "60", "--seed", "1",
                                                  "--max-homopolymer", "1000000000"],
    "CLI score --fasta /dev/zero": ["score", "--fasta", "/dev/zero", "--variant", "10:A>G"],
}


def web_probe(url: str, pid: int, fields: dict, kill_above_mb: float, timeout: float) -> dict:
    from gradio_client import Client

    idle = rss_mb(pid)
    client = Client(url, verbose=False)
    outcome: list[str] = []

    def send() -> None:
        try:
            client.predict(**fields, api_name="/generate")
            outcome.append("answered")
        except Exception as exc:  # the refusal is the expected outcome: its sentence is reported
            outcome.append(f"{type(exc).__name__}: {str(exc)[:150]}")

    began = time.perf_counter()
    with Watch(pid, idle, kill_above_mb) as watch:
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        sender.join(timeout)
    seconds = time.perf_counter() - began
    said = "killed (memory)" if watch.killed else (outcome[0] if outcome else f"no answer in {timeout:.0f} s")
    return {"seconds": round(seconds, 2), "peak_over_idle_mb": round(watch.peak - idle), "outcome": said}


def cli_probe(args: list[str], kill_above_mb: float, timeout: float) -> dict:
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "carbon_app", *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    with Watch(process.pid, 0.0, kill_above_mb) as watch:
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            out = f"no end in {timeout:.0f} s"
    said = "killed (memory)" if watch.killed else out.strip().splitlines()[-1][:150] if out.strip() else ""
    return {"seconds": round(time.perf_counter() - began, 2), "peak_mb": round(watch.peak), "outcome": said}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kill-above-mb", type=float, default=3000)
    parser.add_argument("--timeout", type=float, default=90)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    report: dict = {"web": {}, "cli": {}}
    process, url = start_app()
    try:
        time.sleep(3)
        report["idle_mb"] = round(rss_mb(process.pid))
        for name, fields in WEB_PROBES.items():
            if process.poll() is not None:  # killed by an earlier probe: start again
                process, url = start_app()
                time.sleep(3)
            report["web"][name] = web_probe(url, process.pid, fields, args.kill_above_mb, args.timeout)
            print(name, report["web"][name], flush=True)
    finally:
        process.kill()
    for name, cli_args in CLI_PROBES.items():
        report["cli"][name] = cli_probe(cli_args, args.kill_above_mb, args.timeout)
        print(name, report["cli"][name], flush=True)
    print(f"\nserver idle: {report['idle_mb']} MB")
    print(f"{'probe':48} {'seconds':>8} {'MB over idle':>13}  outcome")
    for name, row in report["web"].items():
        print(f"{name:48} {row['seconds']:8.2f} {row['peak_over_idle_mb']:13}  {row['outcome']}")
    for name, row in report["cli"].items():
        print(f"{name:48} {row['seconds']:8.2f} {row['peak_mb']:>10} MB  {row['outcome']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
