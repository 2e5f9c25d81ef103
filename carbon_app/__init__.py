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
"""

from .core.coding import CodingSequence, Consequence
from .core.tags import SCHEMES, TagScheme
from .core.tokens import CarbonTokenizer, DnaConfig
from .errors import CarbonError, InputError, ModelError
from .genome.reference import Reference
from .genome.scoring import describe_at, score_at, score_batch
from .genome.vcf import score_vcf
from .inference.annotate import VariantReport, describe_variant
from .inference.constraints import DesignConstraints
from .inference.generate import GenerationResult, generate, generate_stream, run_design
from .inference.request import DesignRequest
from .inference.scan import ScanResult, scan_substitutions
from .inference.score import SequenceScore, Variant, VariantScore, score_sequence, score_variant
from .inference.spec import ScoringSpec, resolve_spec
from .model.bundle import ModelBundle, load_bundle
from .model.manager import ModelManager
from .serving.served import ServedModel, connect

load_model = load_bundle
scan = scan_substitutions

__all__ = [
    "CarbonError", "InputError", "ModelError", "GenerationResult", "generate", "generate_stream", "run_design",
    "DesignRequest",
    "ModelBundle", "ModelManager", "load_bundle", "load_model", "SequenceScore", "Variant", "VariantScore",
    "score_sequence", "score_variant", "scan", "ScanResult", "SCHEMES", "TagScheme", "CarbonTokenizer", "DnaConfig",
    "CodingSequence", "Consequence", "VariantReport", "describe_variant", "Reference", "score_at", "describe_at",
    "score_batch", "score_vcf", "DesignConstraints", "ScoringSpec", "resolve_spec", "connect", "ServedModel",
]
