"""Carbon Studio: design and score DNA with the Carbon DNA language models.

The notebook API in a few names::

    import carbon_app as carbon
    model = carbon.load_model("HuggingFaceBio/Carbon-3B")   # or a directory, or a bundled demo
    out = carbon.generate(model, "ATGGCC", 120, species="mammal", mask=None, seed=1)
    out.sequences, out.prompt_text, out.prompt_ids
    carbon.score_variant(model, reference, "120:A>G").delta   # LL(alt) - LL(ref)
    carbon.scan(model, reference, 100, 160).rows()             # every substitution of 100..160
    carbon.score_sequence(model, "ACGT...").logprobs          # per base
    carbon.describe_variant(model, reference, "120:A>G", carbon.CodingSequence.parse("51", reference), context=25)
    genome = carbon.Reference("hg38.fa")
    carbon.score_at(model, genome, "chr11:5227002:T>A").delta  # at coordinates
    carbon.score_vcf(model, genome, "in.vcf.gz", "out.vcf.gz")  # every record back, CARBON_DELTA per ALT
    served = carbon.connect("http://127.0.0.1:8000", "carbon-demo")  # the model as a vLLM server runs it
    carbon.score_variant(served, reference, "120:A>G").delta          # the same delta, computed there

Models are cached by `ModelManager` (one per process is enough); the web UI
and the CLI use the same functions.

Names are imported when first used, so that `import carbon_app.serving.vllm_plugin` in an inference
server's environment (torch and numpy, no Biopython or pysam) reads nothing else of the package.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it); every result names it

_WHERE = {
    ".core.coding": ("CodingSequence", "Consequence"),
    ".core.tags": ("SCHEMES", "TagScheme"),
    ".core.tokens": ("CarbonTokenizer", "DnaConfig"),
    ".errors": ("CarbonError", "InputError", "ModelError"),
    ".genome.reference": ("Reference",),
    ".genome.scoring": ("describe_at", "score_at", "score_batch"),
    ".genome.vcf": ("score_vcf",),
    ".inference.annotate": ("VariantReport", "describe_variant"),
    ".inference.constraints": ("DesignConstraints",),
    ".inference.generate": ("GenerationResult", "generate", "generate_stream", "run_design"),
    ".inference.request": ("DesignRequest",),
    ".inference.scan": ("ScanResult", "scan_substitutions"),
    ".inference.score": ("SequenceScore", "Variant", "VariantScore", "score_sequence", "score_variant"),
    ".inference.spec": ("ScoringSpec", "resolve_spec"),
    ".model.bundle": ("ModelBundle", "load_bundle"),
    ".model.manager": ("ModelManager",),
    ".serving.served": ("ServedModel", "connect"),
}
_ALIASES = {"load_model": "load_bundle", "scan": "scan_substitutions"}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted([*_MODULE_OF, *_ALIASES])


def __getattr__(name: str):
    real = _ALIASES.get(name, name)
    if real not in _MODULE_OF:
        raise AttributeError(f"module 'carbon_app' has no attribute '{name}'")
    value = getattr(importlib.import_module(_MODULE_OF[real], __name__), real)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
