"""What the page says about a result: the verdict follows the frames, the trust note the model's own card."""

from __future__ import annotations

import dataclasses
import json
import re

from carbon_app.app import formatting as fmt
from carbon_app.inference.score import score_variant
from carbon_app.inference.spec import resolve_spec
from carbon_app.model.bundle import load_bundle
from tests.conftest import REPO

HBB_WINDOW = "".join((REPO / "assets/examples/hbb.fa").read_text().split("\n")[1:])[1100:1400]

SEQ = "ATGGTGCATCTGACTCCTGAGGAGAAGTCTGCCGTTACTGCCCTGTGGGGCAAGGTGAACGTGGATGAAGTTGGTGGTGAGG"


def test_the_verdict_names_a_direction_only_when_every_frame_agrees(compact):
    scored = score_variant(compact, SEQ, "21:G>A", window=60)
    agreeing = dataclasses.replace(scored, frame_deltas=[-0.5, -0.4, -0.6, -0.5, -0.45, -0.55], delta=-0.5)
    mixed = dataclasses.replace(scored, frame_deltas=[-0.5, 0.4, -0.6, 0.5, -0.45, 0.55], delta=-0.01)
    assert "**less** likely" in fmt.verdict(agreeing) and "ranges -0.6000 to -0.4000" in fmt.verdict(agreeing)
    assert "**no clear effect**" in fmt.verdict(mixed) and "likely than" not in fmt.verdict(mixed)
    indel = score_variant(compact, SEQ, "21:G>GTT", window=60)
    assert f"inserted {indel.inserted_ll:+.4f}" in fmt.verdict(indel)


def test_the_trust_note_reads_the_models_own_measurement(compact_model_dir, tmp_path):
    bundle = load_bundle(str(compact_model_dir))
    note = fmt.trust_note(bundle, resolve_spec(bundle, method="marginal"))
    assert "ships no held-out variant-effect measurement" in note
    measured = tmp_path / "measured"
    measured.mkdir()
    for f in compact_model_dir.iterdir():
        (measured / f.name).write_bytes(f.read_bytes())
    (measured / "eval.json").write_text(json.dumps({"quality": {
        "demo": True, "stop_gain_vs_synonymous_auroc": 0.75, "splice_site_vs_deep_intronic_auroc": 0.52,
        "random_snv_fraction_negative": 0.6, "method": "chain", "window": 1200,
        "other_methods": {"marginal": {"stop_gain_vs_synonymous_auroc": 0.61,
                                       "splice_site_vs_deep_intronic_auroc": 0.42,
                                       "random_snv_fraction_negative": 0.64}}}}))
    measured_bundle = load_bundle(str(measured))
    assert measured_bundle.card.method == "chain" and bundle.card.method == "marginal"
    note = fmt.trust_note(measured_bundle, resolve_spec(measured_bundle, method="chain"))  # each method's own figures
    assert "**demo model**" in note and "exact chain rule" in note and "AUROC 0.75" in note and "AUROC 0.52" in note
    assert "1,200-base" in note
    assert "held-out genes of its own evaluation set" in note and "close to chance" in note  # not overstated
    # read in one breath, how it was measured folded below
    headline, folded = note.split("\n\n<details><summary>How this was measured</summary>\n\n")
    assert headline == ("**How far to trust it:** a small demo model: on held-out genes it tells stop-gains from "
                        "synonymous changes with AUROC 0.75 (1 = perfect, 0.5 = chance), read as here. Do not read "
                        "its scores as evidence.")
    assert folded.endswith("</details>") and "1,200-base" in folded
    note = fmt.trust_note(measured_bundle, resolve_spec(measured_bundle, method="marginal"))
    assert "reference FNS marginals" in note and "AUROC 0.61" in note and "AUROC 0.42" in note
    (measured / "eval.json").write_text(json.dumps({"quality": {  # an older card: the marginals only
        "demo": True, "stop_gain_vs_synonymous_auroc": 0.61, "splice_site_vs_deep_intronic_auroc": 0.42,
        "random_snv_fraction_negative": 0.6, "window": 1200}}))
    older = load_bundle(str(measured))
    assert older.card.method == "marginal"
    assert "AUROC 0.61" in fmt.trust_note(older, resolve_spec(older, method="marginal"))
    assert "not with the exact chain rule" in fmt.trust_note(older, resolve_spec(older, method="chain"))
    assert "within" not in fmt.trust_note(older, resolve_spec(older, method="marginal"))
    (measured / "eval.json").write_text(json.dumps({"quality": {  # read within a radius, the whole window beside
        "demo": True, "stop_gain_vs_synonymous_auroc": 0.88, "splice_site_vs_deep_intronic_auroc": 0.76,
        "random_snv_fraction_negative": 0.6, "method": "chain", "window": 1200, "delta_radius": 12,
        "whole_window": {"stop_gain_vs_synonymous_auroc": 0.85, "splice_site_vs_deep_intronic_auroc": 0.74,
                         "random_snv_fraction_negative": 0.65}}}))
    local = load_bundle(str(measured))
    note = fmt.trust_note(local, resolve_spec(local, method="chain"))
    assert "summed within 12 bases of the variant (as here)" in note and "AUROC 0.88" in note
    assert "summed over the whole window, 0.85 and 0.74" in note
    # a score read another way is not "as here": the note names each setting that differs from the measured one
    other = fmt.trust_note(local, resolve_spec(local, window=600, strand_average=False))
    assert "as here" not in other.replace("not as here", "")
    assert "window 600 (model's own: 1,200)" in other and "strands one (model's own: both)" in other
    tagged = fmt.trust_note(local, resolve_spec(local, species="mammal"))  # a tag is part of the setup
    assert "not as here: this score's species tag mammal (model's own: none)" in tagged
    # the score line says the setup once, in one sentence that is the spec as used
    scored = score_variant(local, SEQ, "21:G>A", window=60)
    assert ("Read in 60-base windows, 6 tokenization frames, both strands, with the exact chain rule, summed within "
            "12 bases of the variant.") in fmt.verdict(scored)
    assert "summed over the whole window" in fmt.verdict(score_variant(bundle, SEQ, "21:G>A", window=60))
    clamped = score_variant(bundle, SEQ, "21:G>A", window=10**6)
    assert clamped.spec.window < 10**6
    assert "1,000,000 asked for is more than the model's context" in fmt.verdict(clamped)


def test_model_sizes_read_as_people_write_them():
    assert fmt.parameters(5_482_752) == "5.5M" and fmt.parameters(3_012_345_678) == "3.01B"


def test_a_sequence_reads_as_genbank_lays_it_out():
    import re

    from carbon_app.app.formatting import sequence_block

    seq = "ACGT" * 40  # 160 bases
    block = sequence_block(seq, first=1001, marked={0}, highlight={5: "#ffd6d6"})
    text = re.sub(r"<[^>]+>", "", block)
    lines = text.splitlines()
    assert [line.split()[0] for line in lines] == ["1,001", "1,061", "1,121"]  # each line led by its position
    assert [len(g) for g in lines[0].split()[1:]] == [10] * 6 and [len(g) for g in lines[2].split()[1:]] == [10] * 4
    assert "".join("".join(line.split()[1:]) for line in lines) == seq
    assert "text-decoration:underline" in block and "background:#ffd6d6" in block


def test_a_streaming_or_long_design_is_plain_text_with_its_marks_kept():
    import re

    from carbon_app.app.formatting import COLOURED_BASES, bases_html, sequence_block

    seq = "AAACGTTTTG" * 12
    coloured = sequence_block(seq, marked={1})
    plain = sequence_block(seq, marked={1}, coloured=False)
    assert re.sub(r"<[^>]+>", "", coloured) == re.sub(r"<[^>]+>", "", plain)  # the same text, numbered alike
    assert 'class="bA"' in coloured and 'class="b' not in plain
    assert plain.count("<span") == 2 + 1 and 'style="text-decoration:underline">A<' in plain  # rulers + the mark
    # a run of one base is one element; a marked base stands alone
    assert coloured.count("<span") < len(seq) and '<span class="bT">TTTT</span>' in coloured
    few, many = ["ACGT" * 25] * 4, ["ACGT" * 250] * (COLOURED_BASES // 1000 + 1)
    assert 'class="b' in bases_html("", "", few) and "plain text" not in bases_html("", "", few)
    assert 'class="b' not in bases_html("", "", few, coloured=False)
    assert 'class="b' not in bases_html("", "", many) and f"plain text past {COLOURED_BASES:,} bases" in \
        bases_html("", "", many)


def test_many_designs_are_drawn_as_a_band_not_a_tangle():
    from carbon_app.app.plots import LINES_DRAWN, confidence_figure

    n, length = LINES_DRAWN + 4, 30
    probs = [[(i + 1) / (n + 1)] * length for i in range(n)]
    fig = confidence_figure(probs, [[1.0] * length] * n, ["A" * length] * n)
    named = [t.name for t in fig.data if t.showlegend is not False]
    assert named == [f"sample {i}" for i in range(1, LINES_DRAWN + 1)] + [f"all {n} designs: 10-90%",
                                                                        f"all {n} designs: median"]
    median = next(t for t in fig.data if t.name == f"all {n} designs: median")
    assert abs(median.y[0] - 0.5) < 1e-3  # the median of 1/13 ... 12/13


def test_a_variant_is_shown_highlighted_in_both_alleles():
    from carbon_app.app.formatting import variant_blocks
    from carbon_app.inference.score import Variant, VariantScore

    ref = "A" * 40 + "G" + "C" * 40
    scored = VariantScore(variant=Variant(141, "G", "T"), delta=0.0, ll_ref=0, ll_alt=0, window_start=101,
                          window_end=181, ref_window=ref, alt_window=ref[:40] + "T" + ref[41:], ref_logprobs=[],
                          alt_logprobs=[], aligned_ref_pos=[], aligned_ref_logprobs=[], aligned_alt_logprobs=[],
                          site_probs_ref={}, site_probs_alt={}, method="marginal", strand_average=False)
    html = variant_blocks(scored, reach=10)
    assert "reference 131–151" in html and "alternate (141:G&gt;T)" in html
    assert 'background:#e6e6e6;font-weight:bold">G<' in html and 'background:#ffd6d6;font-weight:bold">T<' in html


def test_each_sample_has_one_colour_in_both_confidence_panels():
    from carbon_app.app.plots import confidence_figure

    sequences = ["ACGTA", "TTGCA", "GGCAT"]
    fig = confidence_figure([[0.5] * 5] * 3, [[1.5] * 5] * 3, sequences)
    by_sample = {}
    for trace in fig.data:
        by_sample.setdefault(trace.name, set()).add(trace.line.color)
    assert len(by_sample) == 3 and all(len(colours) == 1 for colours in by_sample.values())
    assert len({next(iter(c)) for c in by_sample.values()}) == 3  # and the samples differ
    assert [t.name for t in fig.data if t.showlegend is not False] == ["sample 1", "sample 2", "sample 3"]


def test_the_trust_note_gives_a_human_variant_its_own_groups_figure_beside_the_pooled_one():
    from carbon_app.assets import ASSETS

    bundle = load_bundle(str(ASSETS / "models" / "carbon-demo"))
    card = json.loads((ASSETS / "models" / "carbon-demo" / "eval.json").read_text())
    mammal = card["target_variants"]["coding"]["auroc"]["mammal"]
    pooled = card["quality"]["stop_gain_vs_synonymous_auroc"]
    note = fmt.trust_note(bundle, resolve_spec(bundle), fmt.variant_group("none", "GRCh38"))
    assert f"for mammal variants such as this one, stop-gain vs synonymous AUROC {mammal:.2f}" in note
    assert f"pooled over every group, {pooled:.2f}" in note
    # the sentence read first says whose figure it gives
    assert note.startswith("**How far to trust it:** a small demo model: on held-out genes it tells stop-gains from "
                           f"synonymous changes among mammal variants with AUROC {mammal:.2f}")
    unknown = fmt.trust_note(bundle, resolve_spec(bundle), fmt.variant_group(None, None))  # a pasted sequence
    assert f"mammal {mammal:.2f}" in unknown and "such as this one" not in unknown
    assert f"synonymous changes with AUROC {pooled:.2f}" in unknown.split("<details>")[0]
    assert fmt.variant_group("plant", "GRCh38") == "plant" and fmt.variant_group(None, "HBB-locus-demo") == "mammal"


def test_a_shared_link_is_built_on_this_servers_own_page_only():
    host = {"host": "127.0.0.1:7860"}
    assert fmt.page_url({**host, "referer": "http://127.0.0.1:7860/?a=1"}) == "http://127.0.0.1:7860/?a=1"
    for foreign in ("https://evil.example/", "javascript:alert(1)//127.0.0.1:7860", "", "ftp://127.0.0.1:7860/"):
        assert fmt.page_url({**host, "referer": foreign}) is None
    assert "](?genome=g&variant=v)" in fmt.share_link(None, genome="g", variant="v")  # relative: this page


def test_text_a_client_sent_is_made_plain_for_markdown_and_html():
    for markup in ('<img src="x" onerror="alert(1)">', "[sign in](http://evil)", "**bold** `code`"):
        made = fmt.plain(markup)
        assert "<" not in made and not re.search(r"(?<!\\)\]\(", made) and not re.search(r"(?<!\\)\*\*", made)
    assert fmt.plain("REF_mismatch in 0.5 s") == "REF_mismatch in 0.5 s"  # plain text reads as it was


def test_a_progress_line_says_what_is_done_of_how_much_and_what_is_left():
    from carbon_app.app.progress import progress_line

    assert progress_line(500, 2000, "ALT alleles", 20.0) == "500 of 2,000 ALT alleles (25%) in 20 s, about 60 s left"
    assert progress_line(0, 2000, "ALT alleles", 3.0) == "0 of 2,000 ALT alleles (0%) in 3 s"  # nothing to go by
    assert progress_line(2000, 2000, "ALT", 80.0) == "2,000 of 2,000 ALT (100%) in 80 s"
    assert progress_line(37, 40, "ALT", 3.0) == "37 of 40 ALT (92%) in 3 s, under a second left"  # not "about 0 s"


def test_the_models_tab_opens_with_what_the_model_is_and_is_good_for(service):
    """The summary above the full card: the demo model named a demo with its measured AUROCs; a model with no
    measurement of its own says so; a draft says it drafts; each says how to run Carbon-500M/3B/8B."""
    facts = service.model_facts("carbon-demo")
    text = fmt.model_summary(**facts)
    quality = json.loads((REPO / "assets/models/carbon-demo/eval.json").read_text())["quality"]
    assert "small demonstration model" in text and "Not good for: biological conclusions" in text
    assert f"stop-gain vs synonymous AUROC {quality['stop_gain_vs_synonymous_auroc']:.2f}" in text
    assert "1,536 bases" in text and "CARBON_MODEL=HuggingFaceBio/Carbon-3B" in text and "CARBON_SERVER" in text
    other = fmt.model_summary("lab-model", facts["config"], 6, None, None)
    assert "ships no held-out measurement" in other and "demonstration" not in other
    draft = fmt.model_summary(**service.model_facts("carbon-demo-draft"))
    assert "draft of a larger model" in draft and "draft of a larger model" not in text


def test_plots_a_biologist_reads(demo):
    """Variant tracks on sequence positions, the summed bases shaded, the alternate dashed; the site's bars
    numbered for both contexts; a bits logo over the whole design, likeliest letter on top."""
    import numpy as np

    from carbon_app.app.plots import logo_figure, site_figure, variant_figure

    scored = score_variant(demo, HBB_WINDOW, "150:G>T", window=120, frames=2)
    fig = variant_figure(scored)
    ref, alt, bars = fig.data
    assert list(ref.x) == [float(p) for p in scored.aligned_ref_pos] and alt.line.dash == "dash"
    shaded = [shape for shape in fig.layout.shapes if shape.type == "rect"]
    assert {(shape.x0, shape.x1) for shape in shaded} == {(150 - scored.delta_radius - 0.5,
                                                          150 + scored.delta_radius + 0.5)}
    assert fig.layout.legend.y < 0  # below the plots, clear of their titles
    insertion = score_variant(demo, HBB_WINDOW, f"150:{HBB_WINDOW[149]}>{HBB_WINDOW[149]}GG", window=120, frames=1)
    xs = list(variant_figure(insertion).data[0].x)
    at = insertion.variant.pos  # its normal form: left-aligned along any run of G before it
    assert xs == sorted(xs) and at < xs[list(insertion.aligned_ref_pos).index(None)] < at + 1
    assert (fig.layout.yaxis.title.text, fig.layout.yaxis2.title.text) == ("log P (nats)", "Δ (nats)")  # units
    site = site_figure(scored)  # a substitution: the site's distribution is the same in either context
    assert [trace.name for trace in site.data] == [
        "either context (the same: the model reads only the bases before the site)"]
    assert all(text == f"{value:.2f}" for trace in site.data for text, value in zip(trace.text, trace.y, strict=True))
    shifted = {**scored.site_probs_alt, "A": scored.site_probs_alt["A"] + 0.01}
    differing = dataclasses.replace(scored, site_probs_alt=shifted)
    assert [trace.name for trace in site_figure(differing).data] == ["reference context", "alternate context"]
    marginals = np.array([[0.97, 0.01, 0.01, 0.01], [0.25, 0.25, 0.25, 0.25]] + [[0.1, 0.2, 0.3, 0.4]] * 298)
    logo = logo_figure(marginals)
    heights = np.sum([trace.y for trace in logo.data], axis=0)
    assert len(heights) == 300 and heights[1] == 0 and abs(heights[0] - (2 + sum(
        p * np.log2(p) for p in marginals[0]))) < 1e-9
    assert logo.data[-1].text[0] == "A" and logo.data[-1].text[2] == "G"  # the likeliest on top
    assert tuple(logo.layout.xaxis.range) == (0.5, 100.5) and logo.layout.xaxis.rangeslider.visible


def test_the_scan_plot_names_its_open_squares_and_every_axis_its_unit(demo):
    """The scan's heatmap says what its open squares are (the reference base: no substitution there) and what
    its axes and colours measure."""
    from carbon_app.app.plots import scan_figure
    from carbon_app.inference.scan import scan_substitutions

    scan = scan_substitutions(demo, HBB_WINDOW, 140, 150, window=120, frames=1)
    fig = scan_figure(scan)
    heat, squares = fig.data
    assert heat.colorbar.title.text == "delta LL (nats)" and fig.layout.yaxis.title.text == "base it becomes"
    assert squares.showlegend and squares.name == "the reference base (no substitution)"
    assert squares.marker.symbol == "square-open" and list(squares.y) == list(scan.region)
    assert fig.layout.legend.y < 0  # below the heatmap, clear of its axis title


def test_the_consequence_plot_tells_its_classes_apart_by_shape_as_well_as_colour(demo):
    from carbon_app.app.plots import CONSEQUENCE_COLOURS, consequence_figure
    from carbon_app.core.coding import CodingSequence
    from carbon_app.inference.annotate import scan_consequences
    from carbon_app.inference.scan import scan_substitutions

    scan = scan_substitutions(demo, HBB_WINDOW, 140, 150, window=120, frames=1)
    fig = consequence_figure(scan, scan_consequences(scan, HBB_WINDOW, CodingSequence.parse("121..200", HBB_WINDOW)))
    marks = [trace for trace in fig.data if trace.type == "scatter"]
    assert len(marks) >= 2 and all(trace.name in CONSEQUENCE_COLOURS for trace in marks)
    assert len({trace.marker.symbol for trace in marks}) == len(marks)  # one shape each
    assert len({trace.marker.color for trace in marks}) == len(marks)
    assert fig.layout.legend.title.text.startswith("consequence")
    assert fig.layout.yaxis.title.text == "delta LL (nats)" and fig.layout.xaxis.title.text == "position"

