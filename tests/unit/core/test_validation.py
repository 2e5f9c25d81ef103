"""Every field the page sends, checked where the app checks it: each event's own handler, called in-process
with the values a browser or an API client would send, refuses bad input with the one sentence that names
it (a gr.Error, which Gradio shows as a message, never a traceback). The live server is asked one case per
event (tests/integration/app/test_app.py) and the command line its own (tests/unit/app/test_cli.py and
tests/integration/app/test_cli.py)."""

from __future__ import annotations

import asyncio
import inspect

import gradio as gr
import pytest

from carbon_app.app.gradio_app import build_app
from carbon_app.app.service import DEMO_GENOME, AppConfig
from carbon_app.assets import ASSETS


@pytest.fixture(scope="module")
def events(demo_manager, tmp_path_factory):
    """The app's events by API name, built on the shared demo manager as the server builds them."""
    config = AppConfig(models=["carbon-demo", "carbon-demo-draft"], output_dir=tmp_path_factory.mktemp("events"),
                       genomes={DEMO_GENOME: ASSETS / "examples" / "hbb.fa"})
    return {f"/{fn.api_name}": fn.fn for fn in build_app(demo_manager, config).fns.values() if fn.api_name}


def _call(events, api: str, *args):
    out = events[api](*args)
    if inspect.isasyncgen(out):  # a handler that runs a model: its updates, to the end
        async def drain() -> list:
            return [update async for update in out]
        return asyncio.run(drain())
    return list(out) if inspect.isgenerator(out) else out


_DESIGN = dict(model="carbon-demo", species="none", region="none", prompt="ACGTAC", upload=None, n_bases=12, mask="",
               mode="bp", temperature=0.9, top_k=0, top_p=1.0, seed=0, samples=1, speculative=False)
_SCAN = dict(model="carbon-demo", species="none", region="none", sequence="ACGTACGTAC", upload=None, start=2, end=4,
             window=100, method="marginal", cds="")


@pytest.mark.parametrize("api, args, message", [
    ("/generate", ("carbon-demo", "none", "none", "ACGU", None, 10, "", "bp", 0.9, 0, 1.0, 0, 1, False), "RNA"),
    ("/generate", ("carbon-demo", "none", "none", "ACGT", None, 10, "NNN", "bp", 0.9, 0, 1.0, 0, 1, False),
     "mask has 3 positions"),
    ("/generate", ("/etc", "none", "none", "ACGT", None, 10, "", "bp", 0.9, 0, 1.0, 0, 1, False),
     "'/etc' is not one of this server's models"),  # the service refuses paths, naming the field's value
    ("/score_variant", ("carbon-demo", "none", "none", "ACGTACGT", None, "3:A>G", "", 100, False, "marginal", "none",
                        "", 0), "has 'G' at position 3"),
    ("/score_variant", ("carbon-demo", "none", "none", "", None, "chr1:3:A>G", "", 100, False, "marginal", "GRCh99",
                        "", 0), "'GRCh99' is not one of this server's genomes"),
    ("/score_variant", ("carbon-demo", "none", "none", "ACGTACGT", None, "chr1:3:A>G", "", 100, False, "marginal",
                        "HBB-locus-demo", "", 0), "clear the pasted sequence"),
    ("/score_variant", ("carbon-demo", "none", "none", "", None, "HUMHBB_61001-64000:1206:A>T", "", 100, False,
                        "marginal", "HBB-locus-demo", "", 5000), "at most 999"),
    ("/score_variant", ("carbon-demo", "none", "none", "ACGTACGT", None, "3:G>A", "", 100, False, "marginal", "none",
                        "2..99", 0), "must lie within the 8-base sequence"),
    ("/scan", ("carbon-demo", "none", "none", "ACGTACGT", None, 5, 50, 100, "marginal", ""), "within the 8-base"),
    ("/score_vcf", ("carbon-demo", "none", "none", "HBB-locus-demo", None, 600, False, "marginal", 0), "upload a VCF"),
])
def test_bad_input_gets_a_specific_message(events, api, args, message):
    with pytest.raises(gr.Error, match=message):
        _call(events, api, *args)


@pytest.mark.parametrize("api, fields, message", [
    ("/generate", dict(n_bases=0), "the number of bases must be at least 1, not 0"),
    ("/generate", dict(n_bases=2.5), "the number of bases must be a whole number, not 2.5"),
    ("/generate", dict(n_bases=None), "give the number of bases"),
    ("/generate", dict(samples=0), "the number of samples must be between 1 and 64, not 0"),
    ("/generate", dict(samples=65), "the number of samples must be between 1 and 64, not 65"),
    ("/generate", dict(seed=-1), "the seed must be between 0 and"),
    ("/generate", dict(top_k=-1), r"top-k \(0 = off\) must be at least 0, not -1"),
    ("/generate", dict(temperature=-0.5), "temperature must be between 0 and 10"),
    ("/generate", dict(temperature=11), "temperature must be between 0 and 10"),
    ("/generate", dict(top_p=0), "top-p must be above 0 and at most 1"),
    ("/generate", dict(top_p=1.5), "top-p must be above 0 and at most 1"),
    ("/scan", dict(start=0), "the scan start must be at least 1, not 0"),
    ("/scan", dict(end=11), "must lie within the 10-base sequence"),
    ("/scan", dict(window=0), r"the window \(bases\) must be at least 1, not 0"),
    ("/generate", dict(mode="codon"), "mode must be 'bp' .* or 'token'"),  # a choice field: the engine names it
    ("/generate", dict(species="martian"), "unknown species 'martian'"),
    ("/generate", dict(model="/etc"), "'/etc' is not one of this server's models"),
    ("/scan", dict(method="joint"), "scoring method must be 'marginal'"),
])
def test_every_number_field_at_and_beyond_its_limits_gets_a_named_message(events, api, fields, message):
    args = {**(_DESIGN if api == "/generate" else _SCAN), **fields}
    with pytest.raises(gr.Error, match=message):
        _call(events, api, *args.values())


def test_the_design_form_draws_a_fresh_seed_by_default_reports_it_and_the_seed_makes_the_design_again(
        demo_manager, tmp_path):
    demo = build_app(demo_manager, AppConfig(models=["carbon-demo"], output_dir=tmp_path))
    seed_box = next(block for block in demo.blocks.values() if str(getattr(block, "label", "")).startswith("Seed"))
    assert seed_box.value == "" and seed_box.placeholder == "random"  # a fresh seed for each design
    events = {f"/{fn.api_name}": fn.fn for fn in demo.fns.values() if fn.api_name}
    asked = {**_DESIGN, "n_bases": 30, "seed": seed_box.value}
    def design(**fields) -> tuple[dict, str]:
        """The design's result (JSON) and the page's text, from the last update."""
        shown = list(_call(events, "/generate", *{**asked, **fields}.values())[-1].values())
        return next(part for part in shown if isinstance(part, dict) and "seed" in part), " ".join(map(str, shown))

    (first, page), (second, _) = design(), design()
    assert first["seed"] != second["seed"] and first["sequences"] != second["sequences"]
    assert f"seed {first['seed']}" in page  # reported on the page
    assert design(seed=first["seed"])[0]["sequences"] == first["sequences"]


def test_the_form_says_how_length_protein_and_mask_stand_before_generate():
    """A protein sets the length (its codons), and the form says so as it is typed; a mask of another length is
    named against the length the design will have; a mask that fixes bases where the protein's codons go is
    named; a short mask can be padded with N after it or before it (a mask that ends in a stop)."""
    from carbon_app.app.tabs.design import design_length, mask_check, pad_mask

    assert design_length(300, "MSKGEELFTGVV") == (36, "the protein has 12 residues, 36 bases")
    said = mask_check("N" * 300, 300, "MSKGEELFTGVV")
    assert "the design will have 36 bases, encoded from its first base (the 300 typed under Bases are not used)" \
        in said and "the mask has 300 positions but the design will have 36 bases" in said
    assert "a Kozak or other element before the start belongs in the prompt" in mask_check("GCCACCNNN", 9, "MSK")
    assert "Pad with N" in mask_check("TAA", 30) and mask_check("N" * 30, 30) == "✓ mask of 30 positions"
    assert pad_mask("TAA", 30, before=True) == "N" * 27 + "TAA" and pad_mask("GCCACCATGG", 12) == "GCCACCATGGNN"
    assert pad_mask("ATG", 0, "MSK") == "ATGNNNNNN" and pad_mask("N" * 40, 30) == "N" * 40  # not cut
