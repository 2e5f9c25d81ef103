"""Timing a run on the host or a GPU, side by side with its contenders, and the memory-bandwidth bound a
decode step is measured against: shared by the benchmark suites (`bench`) and the GPU report (`gpu_report`)."""

from __future__ import annotations

import statistics
import time

import torch


def timed(fn) -> tuple[float, object]:
    """(seconds, output) of one call of `fn`, the GPU's queued work finished on both sides."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    began = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - began, out


def interleaved_times(contenders: dict, repeats: int, outputs: dict | None = None) -> dict[str, list[float]]:
    """Each contender run once to warm up, then timed `repeats` times, interleaved, so that drift in
    the machine's load hits every contender alike; `outputs`, when given, receives each one's last output."""
    for fn in contenders.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            seconds, output = timed(fn)
            times[name].append(seconds)
            if outputs is not None:
                outputs[name] = output
    return times


def device_name(device: torch.device | str) -> str:
    """The GPU's name as CUDA reports it, or "CPU"."""
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def paired_ratio(times_a: list[float], times_b: list[float]) -> float:
    """Median over repeats of a_i / b_i. Each pair ran back to back, so a slow spell on the
    machine lands on both terms of a pair more often than on both medians."""
    return statistics.median(a / b for a, b in zip(times_a, times_b, strict=True))


#: Nominal memory bandwidth (GB/s) of GPUs the app is run on, for the report beside the measured copy speed.
NOMINAL_GB_S = {"A10": 600, "A100-SXM4-80GB": 2039, "A100-SXM4-40GB": 1555, "A100-PCIE-40GB": 1555,
                "A100 80GB PCIe": 1935, "H100 80GB HBM3": 3350, "H100 PCIe": 2000, "H200": 4800, "L4": 300,
                "L40S": 864, "T4": 320}


def copy_bandwidth(device: str, n_bytes: int = 2**30) -> float:
    """Measured device memory bandwidth (GB/s, read + write) of a large tensor copy: the practical peak."""
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    best = min(timed(lambda: dst.copy_(src))[0] for _ in range(6))
    return 2 * n_bytes / best / 1e9


def decode_step_bytes(bundle, mean_context: int) -> int:
    """Bytes a batch-1 decode step must read: decoder weights (one embedding row aside), the k-mer head
    and the KV cache at `mean_context` tokens."""
    embed = bundle.decoder.embed
    weights = bundle.decoder.n_bytes - embed.numel() * embed.element_size()
    weights += bundle.dna_head.numel() * bundle.dna_head.element_size()
    return weights + bundle.memory.bytes_for(mean_context, 0, 0)
