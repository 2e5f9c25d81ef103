"""Every setting the app, the command line and the engine take from the environment, declared once: its name,
its default, what it means and how its value is checked.

`get(name)` is the one reader of the environment for a setting: it checks the value as the setting declares
and refuses a bad one with one sentence that names it (an `InputError`, so the CLI prints it and the server
does not start). `check_all()` reads every setting once at start (the server's launch, every CLI command), so
a bad value is named before any model loads rather than when a request first meets it. `SETTINGS` is the
table `docs/settings.md` lists (`markdown_table`; a test keeps the two the same).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .core.validate import real_number, whole_number
from .errors import InputError


def _whole(low: int, high: int | None = None) -> Callable[[str, str], int]:
    return lambda text, name: whole_number(text, name, low, high)


def _positive_real(text: str, name: str) -> float:
    return real_number(text, name, 0, above_low=True)


def _seconds(text: str, name: str) -> float:
    return real_number(text, name, 0)


def _switch(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "t", "yes", "on"}:
        return True
    if value in {"0", "false", "f", "no", "off"}:
        return False
    raise InputError(f"{name} must be 1 or 0 (on or off), not '{text[:40]}'")


def _text(text: str, name: str) -> str:
    return text.strip()


@dataclass(frozen=True)
class Setting:
    name: str
    default: str  # as it would be written in the environment; "" for none
    meaning: str
    parse: Callable[[str, str], Any] = _text  # (text, name) -> value, or InputError naming the setting
    secret: bool = False  # never shown: a message names the setting, not its value

    @property
    def kind(self) -> str:
        return {_switch: "on/off (1/0)", _positive_real: "number > 0", _seconds: "number >= 0",
                _text: "text"}.get(self.parse, "whole number")


SETTINGS: tuple[Setting, ...] = (
    # what is served
    Setting("CARBON_MODEL", "", "the model to serve (a bundled name, a hub id `owner/name[@revision]` or a local "
            "directory, `NAME=PATH` to name it); default: the bundled demo model, or the released one on a Space"),
    Setting("CARBON_MODELS", "", "several models to serve, comma-separated (as CARBON_MODEL); the first is the "
            "page's default"),
    Setting("CARBON_REFERENCES", "", "genomes for coordinates and VCFs, `NAME=PATH,...` (indexed FASTA, plain or "
            "bgzipped)"),
    Setting("CARBON_SERVER", "", "an inference server (vLLM) that runs the model instead of this process: "
            "`http://host:8000` (or its `/v1` address)"),
    Setting("CARBON_SERVER_API_KEY", "", "the key the inference server asks for (sent as a Bearer token)",
            secret=True),
    Setting("CARBON_SERVER_TIMEOUT_S", "300", "seconds one request to the inference server may take",
            _positive_real),
    Setting("CARBON_SERVER_IN_FLIGHT", "8", "requests one job keeps at the inference server at once", _whole(1)),
    Setting("CARBON_SERVER_CONCURRENCY", "16", "with an inference server: requests of all users sent to it at "
            "once (the rest queue)", _whole(1, 256)),
    # the web server
    Setting("GRADIO_SERVER_NAME", "0.0.0.0", "the address the page is served on"),
    Setting("GRADIO_SERVER_PORT", "7860", "the port the page is served on", _whole(1, 65535)),
    Setting("CARBON_AUTH", "", "sign-in: `USER:PASSWORD`, comma-separated for several; unset, the page is open",
            secret=True),
    Setting("CARBON_QUEUE_SIZE", "32", "requests waiting in the queue before a new one is refused as busy",
            _whole(1)),
    Setting("CARBON_JOBS_PER_CLIENT", "2", "model jobs one visitor (one address) may have waiting or running at "
            "once; one more is refused until one ends", _whole(1)),
    Setting("CARBON_PROXY_HOPS", "", "proxies in front of the app that add the visitor's address to "
            "X-Forwarded-For: each visitor is known by the address the outermost one saw (default: 1 on a Space, "
            "else 0: the address the server sees)", _whole(0, 8)),
    Setting("CARBON_UPLOAD_MB_PER_HOUR", "256", "MB one visitor may upload in any hour; an upload past it is "
            "refused", _whole(1)),
    Setting("CARBON_UPLOADS_MAX_MB", "1024", "MB Gradio's upload cache (uploads, and its copies of the files the "
            "page shows) may hold; an upload past it is refused until the hourly clean-up", _whole(1)),
    Setting("GRADIO_TEMP_DIR", "", "where Gradio caches uploads and its copies of the files the page shows: each "
            "server takes a folder of its own inside it, removed at exit (default: `gradio` in the system's "
            "temporary folder)"),
    Setting("CARBON_PRELOAD", "1", "load every served model at start (0: at its first request)", _switch),
    Setting("CARBON_SHUTDOWN_GRACE_S", "25", "on SIGTERM, seconds the whole close may take (running jobs finish their "
            "current chunk in all but the last 9)",
            _whole(0)),
    # what one request may ask
    Setting("CARBON_VCF_MAX_ALTS", "5000", "ALT alleles one uploaded VCF may hold (the CLI has no limit)",
            _whole(1)),
    Setting("CARBON_VCF_MAX_EXPANDED_MB", "64", "MB an uploaded VCF or genome may expand to when unpacked",
            _whole(1)),
    Setting("CARBON_MAX_JOB_READS", "150000", "windows the model may read for one request (a scan, a VCF, a "
            "ranked context)", _whole(1)),
    # results on disk
    Setting("CARBON_OUTPUT_DIR", "", "where result files are written (default: a fresh temporary folder)"),
    Setting("CARBON_RESULTS_MAX_AGE_HOURS", "24", "hours result files are kept", _positive_real),
    Setting("CARBON_RESULTS_MAX_MB", "2048", "MB of result files kept (the oldest go first)", _whole(1)),
    # the engine
    Setting("CARBON_MEMORY_BUDGET_GB", "", "GiB the models and their requests may use (default: 85% of the GPU, "
            "half the machine's memory on a CPU)", _positive_real),
    Setting("CARBON_CUDA_GRAPHS", "1", "replay decoding steps as CUDA graphs on a GPU (0: off)", _switch),
    Setting("CARBON_COMPILE", "1", "compile the decoding step with torch.compile on a GPU (0: off)", _switch),
    # the command line
    Setting("CARBON_PROGRESS_EVERY_S", "10", "seconds between the CLI's progress lines on a long job (0: a line "
            "for every report)", _seconds),
    # the platform's own, read as facts (set by Hugging Face Spaces and the hub library)
    Setting("SPACE_ID", "", "set by a Hugging Face Space: serve the released model its hardware runs when no "
            "model is configured"),
    Setting("SPACES_ZERO_GPU", "", "set by a ZeroGPU Space: a GPU is lent to each request", _text),
    Setting("HF_HUB_OFFLINE", "", "the hub library's own: never download, use the local cache only", _text),
)
_BY_NAME = {setting.name: setting for setting in SETTINGS}


def get(name: str, environ=None):
    """Setting `name` as the environment (`environ`, default os.environ) has it, checked; its default where it
    is unset or empty; None where it has no default."""
    setting = _BY_NAME[name]  # a name not declared is a bug: KeyError
    text = (os.environ if environ is None else environ).get(name, "")
    if not text.strip():
        text = setting.default
    if not text:
        return None
    try:
        return setting.parse(text, name)
    except InputError as exc:
        if setting.secret:  # the value never reaches a message
            raise InputError(f"{name} is not usable as it is set") from None
        raise InputError(f"the environment variable {exc}") from None


def is_on(name: str) -> bool:
    """An on/off setting (`_switch`) or a platform flag set to a true word."""
    value = get(name)
    return value if isinstance(value, bool) else str(value or "").lower() in {"1", "t", "true", "yes"}


def check_all(environ=None) -> None:
    """Read every setting once, refusing the first bad one by name: before any model loads."""
    for setting in SETTINGS:
        get(setting.name, environ)


def markdown_table() -> str:
    """The settings as the documentation lists them."""
    rows = ["| setting | default | kind | meaning |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | {f'`{s.default}`' if s.default else '(none)'} | {s.kind} | {s.meaning} |"
             for s in SETTINGS]
    return "\n".join(rows) + "\n"
