"""Where a model's files are: bundled demo models, hub checkpoints, local directories.

A model is a directory in the Hugging Face format (`config.json`, safetensors
weights) plus `dna_config.json`, the text-tokenizer files and optionally
`tag_scheme.json`. It is named one of three ways:

- a bundled demo model: a folder name under `assets/models/`;
- a hub id such as `HuggingFaceBio/Carbon-3B`, optionally `@revision`;
- a local directory path.

A server names its models in CARBON_MODELS (a comma list) or CARBON_MODEL; a local directory there is
known by its folder's name, or by NAME in a `NAME=PATH` entry (`configured_models`), so a client sees
that name and never the server's path, and every lookup of the name finds the directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import settings
from ..assets import ASSETS
from ..errors import ModelError

ASSETS_MODELS = ASSETS / "models"

#: Released checkpoints, the revision each is fetched at and the draft each pairs with for speculative decoding.
#: A revision is the one place a release is pinned (a commit id); "main" follows the hub. `id@<commit>` in
#: CARBON_MODEL(S) pins a deployment of its own.
HUB_MODELS = {
    "HuggingFaceBio/Carbon-500M": {"revision": "main", "draft": None},
    "HuggingFaceBio/Carbon-3B": {"revision": "main", "draft": "HuggingFaceBio/Carbon-500M"},
    "HuggingFaceBio/Carbon-8B": {"revision": "main", "draft": "HuggingFaceBio/Carbon-500M"},
}
_CODEC_FILES = ["*.json", "merges.txt", "vocab.json", "*.model", "*.md"]  # config, codec, tags, card
_HUB_FILES = [*_CODEC_FILES, "*.safetensors"]


#: What a Hugging Face Space made from this repository serves when its owner configures nothing: the model its
#: hardware runs (Carbon-3B with Carbon-500M drafting needs a GPU; Carbon-500M alone runs on a Space's CPU).
SPACE_MODELS = {"gpu": "HuggingFaceBio/Carbon-3B", "cpu": "HuggingFaceBio/Carbon-500M"}


def space_models() -> list[str]:
    """On a Hugging Face Space (SPACE_ID set) where neither CARBON_MODEL nor CARBON_MODELS is set: the released
    model its hardware runs (`SPACE_MODELS`; a ZeroGPU Space, SPACES_ZERO_GPU, has a GPU for each request);
    elsewhere none."""
    if not settings.get("SPACE_ID") or configured_models():
        return []
    import torch

    return [SPACE_MODELS["gpu" if on_zero_gpu() or torch.cuda.is_available() else "cpu"]]


def on_zero_gpu() -> bool:
    """Whether this is a ZeroGPU Space (SPACES_ZERO_GPU, as the `spaces` package reads it): a GPU is lent to
    each call of a function wrapped in spaces.GPU."""
    return settings.is_on("SPACES_ZERO_GPU")


def bundled_models() -> list[str]:
    """Names of the demo models shipped in `assets/models/`."""
    if not ASSETS_MODELS.is_dir():
        return []
    return sorted(p.name for p in ASSETS_MODELS.iterdir() if (p / "config.json").exists())


def _named(entry: str) -> tuple[str, str]:
    """(the name a client sees, where the model is) of one CARBON_MODEL(S) entry."""
    name, given, source = entry.partition("=")
    if given:
        if not name.strip() or not source.strip():
            raise ModelError(f"the model entry '{entry[:80]}' is not NAME=PATH (CARBON_MODEL, CARBON_MODELS)")
        return name.strip(), source.strip()
    local = Path(entry).expanduser()
    return (local.name if entry not in bundled_models() and local.is_dir() else entry), entry


def configured_models() -> dict[str, str]:
    """The models CARBON_MODELS (else CARBON_MODEL) names, in order, each as {the name a client sees: where
    it is}: a bundled name or hub id as itself, a local directory by its folder's name or by NAME in a
    `NAME=PATH` entry."""
    return dict(_entries(settings.get("CARBON_MODELS") or settings.get("CARBON_MODEL") or ""))


def _entries(text: str) -> list[tuple[str, str]]:
    """(shown name, source) of each entry of a comma list of models."""
    return [_named(entry.strip()) for entry in text.split(",") if entry.strip()]


def _source(name: str) -> str:
    """Where the model `name` is: the path of a local directory CARBON_MODELS or CARBON_MODEL names so, else
    `name` itself."""
    for key in ("CARBON_MODELS", "CARBON_MODEL"):
        for shown, source in _entries(settings.get(key) or ""):
            if shown == name:
                return source
    return name


#: A model directory's own note of its role: {"role": "target" or "draft", "draft": its draft's name}.
ROLE_FILE = "carbon_role.json"


def model_role(model_dir: Path) -> dict:
    """What `model_dir`'s ROLE_FILE says of it; empty where it has none or it cannot be read (a model
    without one is a plain model: no role, no draft)."""
    try:
        role = json.loads((Path(model_dir) / ROLE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return role if isinstance(role, dict) else {}


def default_model_name() -> str:
    """The model CARBON_MODEL names (by the name a client sees), else the bundled demo target."""
    configured = settings.get("CARBON_MODEL")
    if configured:
        return _named(configured)[0]
    return bundled_default()


def bundled_default() -> str:
    """The bundled demo target (the model that works offline, with no configuration)."""
    for name in bundled_models():
        if model_role(ASSETS_MODELS / name).get("role") == "target":
            return name
    bundled = bundled_models()
    if bundled:
        return bundled[0]
    raise ModelError("no model given and no bundled demo model found: pass a model name or directory")


def split_revision(name: str) -> tuple[str, str | None]:
    if "@" in name:
        repo, revision = name.rsplit("@", 1)
        return repo, revision or None
    return name, None


def looks_like_hub_id(name: str) -> bool:
    repo, _ = split_revision(name)
    parts = repo.split("/")
    return len(parts) == 2 and all(parts) and not repo.startswith((".", "/", "~"))


def resolve_model_dir(name: str, weights: bool = True) -> Path:
    """Directory holding the files of model `name`, downloading from the hub if needed (without `weights`,
    a hub model's files but its weights: what a client of a server that runs it reads)."""
    name = _source(name.strip())
    if not name:
        raise ModelError("no model name given")
    if name in bundled_models():
        return ASSETS_MODELS / name
    local = Path(name).expanduser()
    if local.is_dir():
        if not (local / "config.json").exists():
            raise ModelError(f"the directory '{local}' holds no config.json: it is not a model directory")
        return local
    if looks_like_hub_id(name):
        return _hub_snapshot(name, _HUB_FILES if weights else _CODEC_FILES)
    known = ", ".join(bundled_models() + list(HUB_MODELS)) or "none"
    raise ModelError(
        f"unknown model '{name}': not a bundled model, a local model directory, or a hub id "
        f"(known: {known})"
    )


def _hub_snapshot(name: str, files: list[str]) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo, revision = split_revision(name)
    revision = revision or HUB_MODELS.get(repo, {}).get("revision", "main")
    try:  # the cache first: no network when the files are already here
        return Path(snapshot_download(repo, revision=revision, allow_patterns=files, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        pass
    if settings.is_on("HF_HUB_OFFLINE"):
        raise ModelError(
            f"model '{repo}' (revision {revision}) is not in the local Hugging Face cache and "
            "HF_HUB_OFFLINE is set: download it first or point to a local directory"
        )
    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=files))
    except (HfHubHTTPError, OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(
            f"model '{repo}' (revision {revision}) is not in the local cache and could not be "
            f"downloaded from the hub ({reason[:200]})"
        ) from None


# -- loading ----------------------------------------------------------------------------


def draft_for(name: str, path: Path | None = None) -> str | None:
    """Name of the draft model that pairs with target `name`, if any."""
    repo, _ = split_revision(name)
    if repo in HUB_MODELS:
        return HUB_MODELS[repo]["draft"]
    return model_role(path or Path(_source(name))).get("draft")


# -- the cache ------------------------------------------------------------------------

