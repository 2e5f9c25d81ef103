"""A launched app probed as an attacker would: every handler, by fn_index, with names that point at the hub,
at directories and at traversals, against a local fake hub that logs every request it gets.

Nothing a client names may reach the hub or the disk unless the server serves it (`Service.served`). The
server runs under an audit hook (`sys.addaudithook`, loaded through a `sitecustomize` on its PYTHONPATH) that
records every file or directory it opens under a canary model directory, so "nothing is read" is observed in
the server process itself, not inferred from its answers.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from benchmarks.soak import start_app

AUDIT_HOOK = '''
import os, sys
_root = os.path.realpath(os.environ["CARBON_TEST_CANARY"])
_log = os.environ["CARBON_TEST_AUDIT_LOG"]

def _hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.realpath(os.fsdecode(args[0]))
        if path == _root or path.startswith(_root + os.sep):
            with open(_log, "a") as log:
                log.write(event + " " + path + "\\n")

sys.addaudithook(_hook)
'''

CANARY_SPECIES = "canaryspecies"  # a tag only the canary model's scheme has: seen in an answer = its file was read


class Recorder(BaseHTTPRequestHandler):
    """Answers every request (a proxy's CONNECT too) with 404 and remembers it in its server's `seen`."""

    def _answer(self):
        self.server.seen.append(f"{self.command} {self.path}")
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "Repository not found"}')

    do_GET = do_HEAD = do_POST = do_PUT = do_CONNECT = _answer

    def log_message(self, *args):  # quiet
        pass


@contextmanager
def recording_server():
    """A `Recorder` on loopback while the block runs: (its URL, the requests that reached it)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def fake_hub():
    """A hub that has nothing: (its URL, what it was asked)."""
    with recording_server() as hub:
        yield hub


@pytest.fixture(scope="module")
def canary(tmp_path_factory) -> Path:
    """A directory that looks like a model: what an attacker would point the server at."""
    root = tmp_path_factory.mktemp("canary") / "model"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (root / "tag_scheme.json").write_text(json.dumps({"species": {CANARY_SPECIES: "<canary>"}, "regions": {}}))
    (root / "eval.json").write_text(json.dumps({"quality": {"method": "chain"}}))
    (root / "README.md").write_text("canary card")
    return root


@pytest.fixture(scope="module")
def probed_server(tmp_path_factory, fake_hub, canary):
    hub_url, _ = fake_hub
    work = tmp_path_factory.mktemp("probed")
    (work / "hook").mkdir()
    (work / "hook" / "sitecustomize.py").write_text(AUDIT_HOOK)
    audit_log = work / "audit.log"
    audit_log.write_text("")
    log = work / "app.log"
    try:
        process, url = start_app(log, CARBON_MODEL="", CARBON_OUTPUT_DIR=str(work / "out"), HF_HUB_OFFLINE="0",
                                 HF_ENDPOINT=hub_url, PYTHONPATH=str(work / "hook"),
                                 CARBON_TEST_CANARY=str(canary), CARBON_TEST_AUDIT_LOG=str(audit_log))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield url, audit_log, log
    process.terminate()
    process.wait(timeout=30)


def call(url: str, fn_index: int, data: list, queued: bool, timeout: float = 120) -> dict:
    """One event by fn_index, as the page's own script sends it: straight to the handler when it is not
    queued, else through the queue, reading the event stream until this event completes."""
    session = uuid.uuid4().hex[:10]
    body = {"fn_index": fn_index, "data": data, "session_hash": session, "event_data": None, "trigger_id": None}
    with httpx.Client(base_url=url, timeout=timeout) as client:
        if not queued:
            answer = client.post("gradio_api/run/predict", json=body)
            return {"status": answer.status_code, "text": answer.text}
        joined = client.post("gradio_api/queue/join", json=body)
        if joined.status_code != 200:
            return {"status": joined.status_code, "text": joined.text}
        event = joined.json()["event_id"]
        seen = []
        with client.stream("GET", "gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                seen.append(line)
                if message.get("event_id") == event and message.get("msg") == "process_completed":
                    return {"status": 200, "text": "\n".join(seen), "success": message.get("success")}
        return {"status": 200, "text": "\n".join(seen), "success": None}


def handlers(url: str) -> list[dict]:
    """Every event of the page that runs server code, with the types and default values of its inputs."""
    config = httpx.get(f"{url}config", timeout=30).json()
    components = {c["id"]: c for c in config["components"]}
    found = []
    for dep in config["dependencies"]:
        if not dep.get("backend_fn") or not dep["inputs"]:
            continue
        inputs = [(components[i]["type"], components[i].get("props", {}).get("value")) for i in dep["inputs"]]
        found.append({"fn_index": dep["id"], "api_name": dep.get("api_name"), "queued": bool(dep.get("queue")),
                      "inputs": inputs})
    return found


def names(canary: Path) -> list[str]:
    return ["evil-owner/big-repo", "evil-owner/big-repo@refs/pr/1", "HuggingFaceBio/Carbon-8B", str(canary),
            f"{canary}/../{canary.name}", "../../../../../etc", "~/.cache/huggingface/hub", "file:///etc/passwd"]


def attack(inputs: list[tuple[str, object]], name: str, canary: Path, only: int | None = None) -> list:
    """The inputs of one event with `name` in every name or text field (or only in field `only`), the others at
    their defaults; an upload field names a file inside the canary directory."""
    data = []
    for i, (kind, default) in enumerate(inputs):
        if only is not None and i != only:
            data.append(default)
        elif kind in ("dropdown", "textbox"):
            data.append(name)
        elif kind == "file":
            data.append({"path": str(canary / "config.json"), "orig_name": "x.vcf",
                         "meta": {"_type": "gradio.FileData"}})
        elif kind == "state":
            data.append(True)  # the shared link's "run it" flag
        else:
            data.append(default)
    return data


def test_no_handler_lets_a_client_reach_the_hub_or_read_a_directory_it_names(probed_server, fake_hub, canary):
    url, audit_log, log = probed_server
    _, hub_asked = fake_hub
    found = handlers(url)
    by_api = {h["api_name"] for h in found}
    # the handlers that take a model name, queued or not, are all among those probed
    assert {"generate", "score_variant", "score_vcf", "scan", "load_model", "unload_model", "model_card",
            "model_dropdowns", "variant_from_link"} <= by_api
    answers = []
    for handler in found:
        for name in names(canary):
            answers.append(call(url, handler["fn_index"], attack(handler["inputs"], name, canary), handler["queued"]))
        # each name field alone, the rest at their defaults (a valid model), so every later check is reached too
        for i, (kind, _) in enumerate(handler["inputs"]):
            if kind == "dropdown":
                for name in ("evil-owner/big-repo", "HuggingFaceBio/Carbon-8B", str(canary), "../../../../../etc"):
                    answers.append(call(url, handler["fn_index"], attack(handler["inputs"], name, canary, only=i),
                                        handler["queued"]))
    assert len(answers) > 200
    assert hub_asked == [], f"the hub was asked: {hub_asked[:5]}"
    assert audit_log.read_text() == "", f"the server read the canary directory: {audit_log.read_text()[:500]}"
    assert not any(CANARY_SPECIES in a["text"] or "canary card" in a["text"] for a in answers)
    # Gradio's own refusals (an upload path it did not receive, an example index that is not one) log their
    # tracebacks; none may pass through this project's code
    ours = [block for block in log.read_text().split("Traceback (most recent call last):")[1:] if "carbon_app" in block]
    assert not ours, ours[0][-1500:]
    # still serving, and nothing was loaded or cached under a client's name
    models = call(url, next(h["fn_index"] for h in handlers(url) if h["api_name"] == "load_model"), ["carbon-demo"],
                  True)
    assert models["success"] and "evil-owner" not in models["text"]


def test_a_directory_that_exists_and_one_that_does_not_get_the_same_answer(probed_server, canary):
    """No oracle: the answer to a name that is not served tells nothing about the disk or the hub."""
    url, _, _ = probed_server
    dropdowns = next(h for h in handlers(url) if h["api_name"] == "model_dropdowns")
    present = call(url, dropdowns["fn_index"], [str(canary)], dropdowns["queued"])
    absent = call(url, dropdowns["fn_index"], [str(canary) + "-absent"], dropdowns["queued"])
    assert present["status"] == absent["status"] != 200
    assert "is not one of this server's models" in present["text"]
    assert present["text"].replace(str(canary), "NAME") == absent["text"].replace(str(canary) + "-absent", "NAME")


PEAK_CHILD = '''
import resource, sys
from pathlib import Path
from carbon_app.app.service import AppConfig, Service
from carbon_app.errors import InputError
from carbon_app.model.manager import ModelManager

service = Service(ModelManager(device="cpu"), AppConfig.from_env())
try:
    service.score_vcf("carbon-demo", "HBB-locus-demo", sys.argv[1])
    print("scored")
except InputError as exc:
    print("refused:", exc)
print("peak_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
'''


def _peak(path: Path, tmp_path: Path) -> tuple[str, float]:
    """What the server's VCF path says of an upload, and the peak memory of the process that read it."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    out = subprocess.run([sys.executable, "-c", PEAK_CHILD, str(path)], cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "CARBON_OUTPUT_DIR": str(tmp_path / "out"),
                                           "CARBON_MODEL": "", "HF_HUB_OFFLINE": "1"})
    lines = out.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("peak_mb"), out.stderr[-2000:]
    return lines[-2], float(lines[-1].split()[1])


def _gzip_of(path: Path, head: bytes, piece: bytes, repeats: int) -> Path:
    import gzip

    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(head)
        for _ in range(repeats):
            out.write(piece)
    return path


def test_gzip_bombs_are_refused_by_what_they_expand_to_in_constant_memory(tmp_path):
    """Three bombs, each a few hundred KB on the wire and hundreds of MB inside: header lines, one endless
    line, blank lines. Each is refused, naming the limit, before any model is loaded, and the process that
    read it peaks no higher than one that read a small VCF."""
    column = b"#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
    small = tmp_path / "small.vcf"
    small.write_bytes(b"##fileformat=VCFv4.2\n" + column + b"HUMHBB_61001-64000\t1206\t.\tA\tT\t.\t.\t.\n")
    bombs = {
        "header lines": _gzip_of(tmp_path / "headers.vcf.gz", b"", b"##x\n" * 2**16, 800),  # 200 MB of ##x
        "one long line": _gzip_of(tmp_path / "line.vcf.gz", b"", b"#" * 2**18, 800),  # 200 MB, no newline
        "blank lines": _gzip_of(tmp_path / "blank.vcf.gz", b"##fileformat=VCFv4.2\n" + column, b"\n" * 2**18, 800),
    }
    for path in bombs.values():
        assert path.stat().st_size < 5 * 2**20  # within the upload limit: only what it expands to is too much
    answer, baseline = _peak(small, tmp_path)
    assert answer == "scored"  # the small one is scored: its peak includes the model, the bombs' do not need it
    for kind, path in bombs.items():
        answer, peak = _peak(path, tmp_path)
        assert answer.startswith("refused:"), kind
        assert {"header lines": "header lines", "one long line": "longer than", "blank lines": "blank lines"}[kind] \
            in answer
        assert peak < baseline + 40, (kind, peak, baseline)


def test_with_carbon_auth_every_route_asks_for_a_sign_in_and_the_password_is_never_logged(tmp_path):
    from gradio_client import Client

    password = "s3cret-pass-7"
    log = tmp_path / "app.log"
    process, url = start_app(log, CARBON_MODEL="", CARBON_PRELOAD="0", HF_HUB_OFFLINE="1",
                             CARBON_OUTPUT_DIR=str(tmp_path / "out"), CARBON_AUTH=f"ana:{password},ben:other-one")
    try:
        for path in ("config", "gradio_api/info"):  # what a client reads before it can call anything
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + path, timeout=30)
            assert refused.value.code == 401, path
        with pytest.raises(Exception, match="credentials were not provided"):
            Client(url, verbose=False)
        with pytest.raises(ValueError, match="Could not login"):
            Client(url, auth=("ana", "wrong"), verbose=False)
        table, _, data = Client(url, auth=("ben", "other-one"), verbose=False).predict(api_name="/models")
        assert "carbon-demo" in data["configured"]
        # the sign-in page says nothing of the API: no endpoint, parameter, model or genome name
        signed_out = urllib.request.urlopen(url, timeout=30).read().decode()
        assert '"auth_required":true' in signed_out.replace(" ", "")
        assert "window.gradio_api_info = {};" in signed_out
        assert not [word for word in ("score_variant", "carbon-demo", "HBB-locus-demo", "genome_file")
                    if word in signed_out]
        import http.cookiejar

        jar = http.cookiejar.CookieJar()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        browser.open(url + "login", data=urllib.parse.urlencode({"username": "ana", "password": password}).encode(),
                     timeout=30)
        signed_in = browser.open(url, timeout=30).read().decode()
        assert "score_variant" in signed_in and "window.gradio_api_info = {};" not in signed_in  # the page itself
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert password not in log.read_text()
    bad = tmp_path / "bad.log"
    with pytest.raises(RuntimeError, match="CARBON_AUTH entry 'ben' is not USER:PASSWORD") as exited:
        start_app(bad, CARBON_MODEL="", CARBON_PRELOAD="0", HF_HUB_OFFLINE="1", CARBON_AUTH=f"ana:{password},ben:")
    assert password not in str(exited.value) and password not in bad.read_text()


def _upload(url: str, size: int, visitor_number: int, name: str = "seq.fa") -> httpx.Response:
    from benchmarks.soak import visitor

    return httpx.post(f"{url.rstrip('/')}/gradio_api/upload", headers=visitor(visitor_number), timeout=60,
                      files=[("files", (name, b">x\n" + b"A" * (size - 3)))])


def _megabytes(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def test_uploads_keep_to_each_visitors_hourly_budget_and_the_caches_cap_at_full_speed(tmp_path):
    """CARBON_UPLOAD_MB_PER_HOUR (8 here) per visitor and CARBON_UPLOADS_MAX_MB (10) for Gradio's upload cache:
    each upload past either is refused with its sentence before it is read, and 40 visitors uploading at once
    as fast as they can leave the cache within its cap (read on the disk). The cap is the server's own folder's:
    in a GRADIO_TEMP_DIR that already holds another app's 64 MB, a killed run's folder and a running server's,
    uploads come in; the killed run's folder is removed as the server starts, the others are left, and the
    server's own folder goes when it exits."""
    import fcntl
    import os
    from concurrent.futures import ThreadPoolExecutor

    cache = tmp_path / "gradio-cache"
    for folder in ("other-app", "carbon-studio-killed", "carbon-studio-running"):
        (cache / folder).mkdir(parents=True)
        with open(cache / folder / "kept.bin", "wb") as f:
            f.truncate(64 * 2**20)  # 64 MB as the disk's sizes read it (sparse: no time spent writing)
        os.utime(cache / folder, (time.time() - 7200,) * 2)  # two hours old
    running = os.open(cache / "carbon-studio-running", os.O_RDONLY)
    fcntl.flock(running, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held, as a server that runs holds its own
    process, url = start_app(tmp_path / "app.log", CARBON_MODEL="", CARBON_OUTPUT_DIR=str(tmp_path / "out"),
                             HF_HUB_OFFLINE="1", GRADIO_TEMP_DIR=str(cache), CARBON_UPLOAD_MB_PER_HOUR="8",
                             CARBON_UPLOADS_MAX_MB="10")
    mb = 2**20
    try:
        assert [_upload(url, 3 * mb, 1).status_code for _ in range(2)] == [200, 200]
        over = _upload(url, 3 * mb, 1)  # 9 MB in the hour
        assert over.status_code == 429 and over.json()["detail"].startswith(
            "you have uploaded 6 MB in the last hour, and 8 MB is as much as one visitor may")
        assert _upload(url, 3 * mb, 2).status_code == 200  # another visitor: 9 MB in the cache
        full = _upload(url, 3 * mb, 3)
        assert full.status_code == 507 and "space for uploads (10 MB) is full" in full.json()["detail"]
        too_big = _upload(url, 7 * mb, 4)
        assert too_big.status_code == 413 and "at most 6 MB" in too_big.json()["detail"]

        def unsized():  # a body that does not say its size: sent in chunks
            yield b"--x\r\n"

        no_length = httpx.post(f"{url.rstrip('/')}/gradio_api/upload", content=unsized(), timeout=30,
                               headers={"content-type": "multipart/form-data; boundary=x"})
        assert no_length.status_code == 411 and "must say its size" in no_length.json()["detail"]
        with ThreadPoolExecutor(max_workers=8) as pool:  # at full speed, 40 visitors
            answers = list(pool.map(lambda i: _upload(url, mb, 100 + i).status_code, range(40)))
        assert answers.count(200) <= 1 and set(answers) <= {200, 507}, answers  # room for 1 MB at most, then full
        [own] = [folder for folder in cache.glob("carbon-studio-*") if folder.name != "carbon-studio-running"]
        assert _megabytes(own) <= 10.05
        left = {folder.name for folder in cache.iterdir()}  # (with an empty one Gradio makes for its own editor)
        assert {"other-app", "carbon-studio-running", own.name} <= left and "carbon-studio-killed" not in left
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.close(running)
    assert not own.exists() and (cache / "other-app" / "kept.bin").exists()


def test_the_app_reports_to_no_one(tmp_path):
    """Launched with Gradio's usage reports at Gradio's own default (on) and every outside address sent through a
    recording proxy: the app asks no outside address (no version check, no usage report) as it starts, serves
    its page and answers a request. (A self-hosted server talks to its model server and the hub, nothing else.)"""
    from gradio_client import Client

    from tests.conftest import launch_app

    with recording_server() as (proxy, seen):
        # every outside address through the recorder, as through a proxy (loopback not)
        outside = {**{name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
                   **{name: "127.0.0.1,localhost" for name in ("NO_PROXY", "no_proxy")}}
        process, url = launch_app(tmp_path, GRADIO_ANALYTICS_ENABLED="True", **outside)
        try:
            assert b"Carbon Studio" in urllib.request.urlopen(url, timeout=30).read()
            assert Client(url, verbose=False).predict(api_name="/models")[2]["requests_running"] == 0
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert seen == []
