"""An OpenAI-compatible inference server (vLLM; SGLang speaks the same API) as seen from this project.

Only token ids cross the wire: the DNA codec (6-mers, tags, `<dna>`) is this project's, so prompts are
encoded here and sent as ids, and the server's log-probs come back by id. The client retries what the
field's clients retry (429 and 503, a dropped connection) with backoff, bounds every wait, names an
unreachable server within seconds, and never writes its API key anywhere.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from .. import settings
from ..errors import BackendError

RETRIED = {429, 502, 503, 504}  # busy or restarting: worth another try after a pause
_CAP = re.compile(r"max allowed: (\d+)")


class ServerError(BackendError):
    """The server could not be reached, refused a request, or serves something else than this model."""


@dataclass(frozen=True)
class ServerInfo:
    """What the server says of the model it serves."""

    url: str
    model: str  # the name the server serves it under
    root: str  # what it loaded: a hub id or the path of a directory on the server
    max_tokens: int  # its context (max_model_len)
    vocab_returned: int  # log-probs it returns per position at most (all of its vocabulary with -1)


class ServerClient:
    """Requests to one server, bounded and retried. `api_key` (else CARBON_SERVER_API_KEY) is sent as a
    bearer token and never shown: `repr` and every message name the URL only."""

    def __init__(self, url: str, api_key: str | None = None, timeout_s: float | None = None, tries: int = 4):
        import httpx

        # the OpenAI-style base URL vLLM's docs write (http://host:8000/v1) names the same server as its host
        self.url = re.sub(r"/v1$", "", url.strip().rstrip("/"))
        if not re.match(r"^https?://[^/\s]+", self.url):
            raise ServerError(f"the server '{url[:80]}' is not an http:// or https:// address")
        key = api_key if api_key is not None else settings.get("CARBON_SERVER_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = timeout_s or settings.get("CARBON_SERVER_TIMEOUT_S")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(timeout, connect=5.0))
        self.tries = tries

    def __repr__(self) -> str:
        return f"ServerClient({self.url!r})"

    def _send(self, method: str, path: str, body: dict | None = None) -> dict:
        import httpx

        pause = 0.5
        for attempt in range(1, self.tries + 1):
            try:
                response = self._http.request(method, path, json=body)
            except httpx.TimeoutException:
                raise ServerError(f"the server {self.url} did not answer {path} in time "
                                  "(CARBON_SERVER_TIMEOUT_S)") from None
            except httpx.TransportError as exc:
                if attempt == self.tries:
                    raise ServerError(f"the server {self.url} cannot be reached: {type(exc).__name__}") from None
            else:
                if response.status_code == 200:
                    return response.json()
                if response.status_code in (401, 403):
                    raise ServerError(f"the server {self.url} refused the API key (HTTP {response.status_code}): "
                                      "set CARBON_SERVER_API_KEY to the key it expects")
                if response.status_code == 404 and path == "/v1/models":
                    raise ServerError(f"{self.url} is not an inference server's address: it answered HTTP 404 to "
                                      "/v1/models (give the server's base URL, e.g. http://127.0.0.1:8000 or "
                                      "http://127.0.0.1:8000/v1)")
                if response.status_code not in RETRIED or attempt == self.tries:
                    raise ServerError(f"the server {self.url} answered HTTP {response.status_code} to {path}: "
                                      f"{_message(response)}")
            time.sleep(pause)
            pause *= 2
        raise AssertionError("unreachable")

    def info(self, expected_model: str | None = None, probe_ids: tuple[int, int] | None = None) -> ServerInfo:
        """The served model (the one named `expected_model`, else the only one), its context, and how many
        log-probs it returns per position, read with a two-token probe (`probe_ids`)."""
        listed = self._send("GET", "/v1/models").get("data") or []
        names = [entry.get("id") for entry in listed]
        if expected_model and expected_model in names:
            entry = listed[names.index(expected_model)]
        elif len(listed) == 1 and not expected_model:
            entry = listed[0]
        else:
            raise ServerError(f"the server {self.url} serves {', '.join(map(str, names)) or 'no model'}, not "
                              f"{expected_model or 'one model'}: name the one to use")
        returned = 0
        if probe_ids is not None:
            try:
                returned = len(self.prompt_logprobs(entry["id"], list(probe_ids), -1)[1])
            except ServerError as exc:
                cap = _CAP.search(str(exc))
                if not cap:
                    raise
                # vLLM adds the prompt's own token where it is not among the top ones: the cap, not the count
                returned = min(int(cap[1]), len(self.prompt_logprobs(entry["id"], list(probe_ids), int(cap[1]))[1]))
        return ServerInfo(self.url, entry["id"], str(entry.get("root") or entry["id"]),
                          int(entry.get("max_model_len") or 0), returned)

    def prompt_logprobs(self, model: str, ids: list[int], top: int) -> list[dict[int, float] | None]:
        """Per prompt position, {token id: log-prob} of the `top` most likely (-1: all the server allows)
        and the prompt's own token; None at the first position."""
        answer = self._send("POST", "/v1/completions", {"model": model, "prompt": ids, "max_tokens": 1,
                                                        "temperature": 0, "prompt_logprobs": top})
        positions = answer["choices"][0].get("prompt_logprobs")
        if positions is None or len(positions) != len(ids):
            raise ServerError(f"the server {self.url} returned no prompt log-probs: is it vLLM (or SGLang) with "
                              "prompt_logprobs?")
        return [None if p is None else {int(i): float(v["logprob"]) for i, v in p.items()} for p in positions]

    def next_logprobs(self, model: str, ids: list[int], top: int) -> dict[int, float]:
        """{token id: log-prob} of the `top` most likely ids after `ids`: one greedy step's own log-probs
        (the model's: no sampling setting, no Carbon design argument changes them)."""
        answer = self._send("POST", "/v1/completions", {"model": model, "prompt": ids, "max_tokens": 1,
                                                        "temperature": 0, "logprobs": top,
                                                        "return_tokens_as_token_ids": True})
        steps = (answer["choices"][0].get("logprobs") or {}).get("top_logprobs")
        if not steps:
            raise ServerError(f"the server {self.url} returned no log-probs for a step: is it vLLM (or SGLang)?")
        return {int(key.rsplit(":", 1)[1]): float(value) for key, value in steps[0].items()}

    def complete(self, model: str, prompt_ids: list[int], n_tokens: int, *, samples: int, seed: int,
                 sampling: dict, top_logprobs: int, xargs: dict | None = None,
                 allowed_ids: list[int] | None = None) -> list[tuple[list[int], list[dict[int, float]]]]:
        """`samples` completions of exactly `n_tokens` ids after `prompt_ids` (the server's own `n` and seed;
        `sampling`: its temperature, top_k, top_p), each as (ids, per token {id: log-prob} of the
        `top_logprobs` most likely under what the token was drawn from)."""
        body = {"model": model, "prompt": prompt_ids, "max_tokens": n_tokens, "min_tokens": n_tokens,
                "ignore_eos": True, "n": samples, "seed": seed, "logprobs": top_logprobs,
                "return_tokens_as_token_ids": True, "return_token_ids": True, **sampling}
        if xargs:
            body["vllm_xargs"] = xargs
        if allowed_ids is not None:
            body["allowed_token_ids"] = allowed_ids
        choices = sorted(self._send("POST", "/v1/completions", body)["choices"], key=lambda c: c["index"])
        out = []
        for choice in choices:
            ids, steps = choice.get("token_ids"), (choice.get("logprobs") or {}).get("top_logprobs")
            if ids is None or steps is None or len(ids) != n_tokens:
                raise ServerError(f"the server {self.url} returned {len(ids or [])} of {n_tokens} tokens or no "
                                  "log-probs: is it vLLM with return_token_ids?")
            out.append((ids, [{int(key.rsplit(":", 1)[1]): float(value) for key, value in step.items()}
                              for step in steps]))
        return out

    def takes_designs(self, model: str, probe_id: int) -> bool:
        """Whether the server runs Carbon's design plugin (`vllm_plugin`): it refuses a request whose Carbon
        arguments are incomplete; a server without it ignores them and answers."""
        try:
            self._send("POST", "/v1/completions", {"model": model, "prompt": [probe_id], "max_tokens": 1,
                                                    "vllm_xargs": {"carbon_k": 6}})
        except ServerError as exc:
            if "Carbon design argument" in str(exc):
                return True
            raise
        return False

    def tokenize(self, model: str, text: str) -> list[int] | None:
        """The ids the server's own tokenizer reads `text` as; None where it runs without one
        (`--skip-tokenizer-init`: it takes and returns token ids only)."""
        try:
            return self._send("POST", "/tokenize", {"model": model, "prompt": text,
                                                    "add_special_tokens": False})["tokens"]
        except ServerError as exc:
            if "skip_tokenizer_init" in str(exc):
                return None
            raise

    def close(self) -> None:
        self._http.close()


def _message(response) -> str:
    try:
        error = response.json().get("error")
        text = error.get("message") if isinstance(error, dict) else str(error or response.text)
    except ValueError:
        text = response.text
    return " ".join(str(text).split())[:300]
