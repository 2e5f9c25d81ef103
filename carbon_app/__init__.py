"""Carbon Studio: design and score DNA with the Carbon DNA language models.

The notebook API in a few names::

    import carbon_app as carbon
    model = carbon.load_model("HuggingFaceBio/Carbon-3B")   # or a directory, or a bundled demo
    out = carbon.generate(model, "ATGGCC", 120, species="mammal", mask=None, seed=1)
    out.sequences, out.prompt_text, out.prompt_ids
    carbon.score_variant(model, reference, "120:A>G").delta   # LL(alt) - LL(ref)
    carbon.scan(model, reference, 100, 160).rows()             # every substitution of 100..160
    carbon.score_sequence(model, "ACGT...").logprobs          # per base

Models are cached by `ModelManager` (one per process is enough); the web UI
and the CLI use the same functions.
"""

from .errors import CarbonError, InputError, ModelError
from .generate import GenerationResult, generate, generate_stream
from .models import ModelBundle, ModelManager, load_bundle
from .scan import ScanResult, scan_substitutions
from .score import SequenceScore, Variant, VariantScore, score_sequence, score_variant
from .tags import SCHEMES, TagScheme
from .tokens import CarbonTokenizer, DnaConfig

load_model = load_bundle
scan = scan_substitutions

__all__ = [
    "CarbonError", "InputError", "ModelError", "GenerationResult", "generate", "generate_stream",
    "ModelBundle", "ModelManager", "load_bundle", "load_model", "SequenceScore", "Variant", "VariantScore",
    "score_sequence", "score_variant", "scan", "ScanResult", "SCHEMES", "TagScheme", "CarbonTokenizer", "DnaConfig",
]
