"""Per-base scoring and reference-vs-alternate variant scoring."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from carbon_app.core.dna import reverse_complement
from carbon_app.errors import InputError
from carbon_app.genome.coordinates import parse_genomic
from carbon_app.genome.reference import Reference
from carbon_app.genome.scoring import score_batch
from carbon_app.inference.scan import scan_substitutions
from carbon_app.inference.score import Variant, score_sequence, score_variant, variant_passes, variant_window
from carbon_app.inference.spec import resolve_spec
from carbon_app.model.bundle import load_bundle

SEQ = (
    "ATGGTGCATCTGACTCCTGAGGAGAAGTCTGCCGTTACTGCCCTGTGGGGCAAGGTGAACGTGGATGAAGTTGGTGGTGAGGCCCTGGGCAGG"
    "CTGCTGGTGGTCTACCCTTGGACCCAGAGGTTCTTTGAGTCCTTTGGGGATCTGTCCACTCCTGATGCTGTTATGGGCAACCCTAAGGTGAAG"
)


def test_padding_never_scored_and_marginal_scores_are_causal(compact):
    full = score_sequence(compact, SEQ[:60])
    part = score_sequence(compact, SEQ[:40])  # 40 = 6*6 + 4: a partial last token, padded with A
    assert part.logprobs.shape == (40,)
    np.testing.assert_allclose(part.logprobs, full.logprobs[:40], atol=1e-5)
    assert part.prompt_text == "<dna>" + SEQ[:40] + "AA"


def test_n_scores_as_the_best_of_the_four(compact):
    scored = score_sequence(compact, SEQ[:12] + "N" + SEQ[13:24])
    assert scored.logprobs[12] == pytest.approx(np.log(scored.probs[12].max()), abs=1e-6)


def test_chain_method_sums_to_token_loglikelihood(compact):
    import torch

    chain = score_sequence(compact, SEQ[:36], method="chain")
    ids = compact.tokenizer.encode("<dna>" + SEQ[:36])
    with torch.no_grad():
        logp = torch.log_softmax(compact.kmer_logits(compact.hidden_states(torch.tensor([ids]))[0, :-1]), -1)
    token_ll = logp[torch.arange(6), torch.tensor(ids[1:]) - compact.tokenizer.kmer_start_id]
    np.testing.assert_allclose(chain.logprobs.reshape(6, 6).sum(1), token_ll.numpy(), atol=1e-5)


def test_snv_tracks_align_and_delta_is_alt_minus_ref(carbon):
    scored = score_variant(carbon, SEQ, "18:T>A", window=60, frames=1)
    assert scored.delta == pytest.approx(scored.ll_alt - scored.ll_ref)
    assert scored.delta == pytest.approx(sum(scored.alt_logprobs) - sum(scored.ref_logprobs))
    assert len(scored.ref_logprobs) == len(scored.alt_logprobs) == scored.window_end - scored.window_start + 1
    assert scored.alt_window[18 - scored.window_start] == "A" and scored.ref_window[18 - scored.window_start] == "T"
    # bases before the variant's token see the same context, so their scores agree
    before = (18 - scored.window_start) // 6 * 6
    np.testing.assert_allclose(scored.ref_logprobs[:before], scored.alt_logprobs[:before], atol=1e-5)
    assert scored.aligned_ref_pos == list(range(scored.window_start, scored.window_end + 1))
    assert set(scored.site_probs_ref) == set("ACGT")
    assert sum(scored.site_probs_ref.values()) == pytest.approx(1, abs=1e-5)


def test_delta_is_the_mean_of_the_six_frames_each_a_plain_window(carbon):
    scored = score_variant(carbon, SEQ, "100:G>T", window=60, strand_average=True)
    assert len(scored.frame_deltas) == 6 and scored.frame_bases == 60
    assert scored.window_end - scored.window_start + 1 == 65  # the span the six windows lie in
    assert scored.delta == pytest.approx(np.mean(scored.frame_deltas))
    assert scored.delta == pytest.approx(scored.ll_alt - scored.ll_ref)
    assert scored.frame_spread == pytest.approx(np.std(scored.frame_deltas))
    assert len(set(np.round(scored.frame_deltas, 6))) == 6  # the frames really differ
    for f, frame_delta in enumerate(scored.frame_deltas):
        lo = scored.window_start - 1 + f
        alone = score_variant(carbon, SEQ[lo : lo + 60], f"{100 - lo}:G>T", window=60, strand_average=True,
                              frames=1)
        assert alone.delta == pytest.approx(frame_delta, abs=1e-5)
    assert scored.clear_effect == (min(scored.frame_deltas) > 0 or max(scored.frame_deltas) < 0)


def test_frames_near_a_sequence_end_are_those_that_hold_the_variant(compact):
    scored = score_variant(compact, SEQ, "2:T>A", window=60)
    assert scored.window_start == 1 and len(scored.frame_deltas) == 2  # windows starting at base 1 or 2
    with pytest.raises(InputError, match="frames must be"):
        score_variant(compact, SEQ, "18:T>A", frames=7)


def test_indels_change_the_alt_window_and_align_with_gaps(compact):
    deletion = score_variant(compact, SEQ, "57:GA>G", window=40)
    assert SEQ[56:58] == "GA"
    assert len(deletion.alt_window) == len(deletion.ref_window) - 1
    assert deletion.aligned_alt_logprobs.count(None) == 1 and None not in deletion.aligned_ref_logprobs
    insertion = score_variant(compact, SEQ, "90:C>CTT", window=40)
    assert SEQ[89] == "C"
    assert len(insertion.alt_window) == len(insertion.ref_window) + 2
    assert insertion.aligned_ref_pos.count(None) == 2
    gap = insertion.aligned_ref_pos.index(None)
    assert insertion.aligned_ref_pos[gap - 1] == 90 and insertion.aligned_ref_pos[gap + 2] == 91
    assert len(insertion.aligned_delta) == len(insertion.aligned_ref_pos)


def test_indels_are_scored_on_the_bases_both_alleles_have(compact):
    deletion = score_variant(compact, SEQ, "57:GAA>G", window=400)  # the whole sequence in every frame
    shorter = SEQ[:57] + SEQ[59:]
    insertion = score_variant(compact, shorter, "57:G>GAA", window=400)  # the insertion that undoes it
    assert deletion.delta == pytest.approx(-insertion.delta, abs=1e-6)
    assert deletion.inserted_ll == 0 and deletion.deleted_ll < 0 and insertion.inserted_ll < 0
    for scored in (deletion, insertion):
        assert scored.delta_whole_window == pytest.approx(
            scored.delta + scored.inserted_ll - scored.deleted_ll, abs=1e-6)
        assert scored.delta_whole_window == pytest.approx(scored.ll_alt - scored.ll_ref)
    snv = score_variant(compact, SEQ, "18:T>A", window=60)
    assert snv.delta == pytest.approx(snv.delta_whole_window) and snv.inserted_ll == snv.deleted_ll == 0


@pytest.mark.parametrize("variant", ["18:T>A", "57:GA>G", "90:C>CTT", "100:G>T"])
def test_strand_averaging_is_symmetric(compact, variant):
    var = Variant.parse(variant)
    rc_pos = len(SEQ) - (var.pos - 1 + len(var.ref)) + 1
    rc_var = f"{rc_pos}:{reverse_complement(var.ref)}>{reverse_complement(var.alt)}"
    forward = score_variant(compact, SEQ, variant, window=51, strand_average=True)
    backward = score_variant(compact, reverse_complement(SEQ), rc_var, window=51, strand_average=True)
    assert forward.delta == pytest.approx(backward.delta, abs=1e-4)
    assert forward.ref_window == reverse_complement(backward.ref_window)


@pytest.mark.parametrize("variant", ["18:T>A", "57:GA>G", "90:C>CTT"])
def test_an_evaluations_other_readings_come_from_the_same_passes_as_scoring_with_each(compact, variant):
    spec = resolve_spec(compact, window=51, strand_average=True, method="chain")
    passes = variant_passes(compact, SEQ, variant, spec, methods=("chain", "marginal"))
    chain = score_variant(compact, SEQ, variant, spec=spec)
    marginal = score_variant(compact, SEQ, variant, window=51, strand_average=True, method="marginal")
    assert passes.delta("chain", spec.delta_radius) == pytest.approx(chain.delta, abs=1e-9)
    assert passes.delta("marginal", spec.delta_radius) == pytest.approx(marginal.delta, abs=1e-9)
    assert marginal.delta != pytest.approx(chain.delta, abs=1e-6)  # two readings that differ, not one twice
    with pytest.raises(InputError, match="scoring method"):
        variant_passes(compact, SEQ, variant, spec, methods=("bayes",))


def test_window_is_centred_clipped_and_capped(compact):
    assert variant_window(1000, 500, 1, 101) == (450, 551)
    assert variant_window(1000, 3, 1, 101) == (0, 101)
    assert variant_window(1000, 998, 1, 101) == (899, 1000)
    assert variant_window(50, 10, 1, 8000) == (0, 50)
    long = "ACGT" * 1000  # 4000 bases, more than the 512-token (3072-base) test model reads
    scored = score_variant(compact, long, "2000:T>G")
    assert scored.frame_bases <= 3072  # 1 + 511 tokens read, 512 predicted
    assert scored.window_end - scored.window_start + 1 == scored.frame_bases + 5  # six frames
    assert 2000 - scored.window_start == scored.window_end - 2000  # centred on the variant


@pytest.mark.parametrize(
    "variant, message",
    [
        ("18:C>A", "has 'T' at position 18, not 'C'"),
        ("500:A>G", "beyond the"),
        ("0:A>G", "start at 1"),
        ("18:T>T", "changes nothing"),
        ("20T>A", "not of the form"),
        ("20:T->A", "not of the form"),
        ("20:T>", "not of the form"),
        ("", "empty"),
        ("18:T>N", "alleles are A, C, G and T"),
        ("a:T>A", "not of the form"),
    ],
)
def test_bad_variants_name_the_problem(compact, variant, message):
    with pytest.raises(InputError, match=message):
        score_variant(compact, SEQ, variant)


def test_bad_sequences_and_options(compact):
    with pytest.raises(InputError, match="empty"):
        score_sequence(compact, "  \n")
    with pytest.raises(InputError, match="'Z' at position 3"):
        score_sequence(compact, "ACZT")
    with pytest.raises(InputError, match="scores at most"):
        score_sequence(compact, "A" * 5000)
    with pytest.raises(InputError, match="method"):
        score_sequence(compact, "ACGT", method="joint")
    with pytest.raises(InputError, match="window"):
        score_variant(compact, SEQ, "18:T>A", window=0)


def test_a_model_measured_with_the_chain_rule_is_read_with_it_unless_a_method_is_named(compact, compact_model_dir,
                                                                                      tmp_path):
    """The default method is the one a model's held-out measurement names (its card's figures then describe
    the scores a user sees); a model without one is read with the reference FNS marginals."""
    measured = tmp_path / "measured"
    shutil.copytree(compact_model_dir, measured)
    (measured / "eval.json").write_text(json.dumps({"quality": {"method": "chain", "window": 60}}))
    bundle = load_bundle(str(measured))
    own = score_variant(bundle, SEQ, "21:G>A", window=60)
    assert own.method == "chain" and score_variant(compact, SEQ, "21:G>A", window=60).method == "marginal"
    # an older card (eval.json alone) was measured on both strands, as the evaluation reads every model
    assert own.strand_average and own.delta == score_variant(compact, SEQ, "21:G>A", window=60, method="chain",
                                                             strand_average=True).delta
    assert own.delta != score_variant(bundle, SEQ, "21:G>A", window=60, method="marginal").delta
    assert scan_substitutions(bundle, SEQ, 20, 22, window=60).method == "chain"
    assert scan_substitutions(bundle, SEQ, 20, 22, window=60, method="marginal").method == "marginal"
    fasta = tmp_path / "g.fa"
    fasta.write_text(">c\n" + SEQ + "\n")
    at_coordinates = score_batch(bundle, Reference(fasta, "g"), [parse_genomic("c:21:G>A")], window=60)[0]
    assert at_coordinates.delta == pytest.approx(own.delta)  # a batch at coordinates reads it the same way


@pytest.mark.parametrize("method", ["marginal", "chain"])
def test_a_delta_within_a_radius_sums_the_aligned_track_that_near_the_variant(compact, method):
    """A radius keeps the columns within that many bases of the REF allele, on both strands, and the whole
    window is every radius wide enough to hold it: checked against the per-base track the tab plots."""
    site = 31
    variant = f"{site}:{SEQ[site - 1]}>{'A' if SEQ[site - 1] != 'A' else 'C'}"
    whole = score_variant(compact, SEQ, variant, window=60, method=method, delta_radius=None, strand_average=True)
    passes = variant_passes(compact, SEQ, variant, whole.spec)
    assert whole.delta_radius is None
    assert passes.delta(method, 100) == pytest.approx(whole.delta, abs=1e-9)
    for delta_radius in (0, 5, 13):
        near = score_variant(compact, SEQ, variant, window=60, method=method, delta_radius=delta_radius,
                             strand_average=True)
        by_hand = sum(a - r for p, r, a in zip(near.aligned_ref_pos, near.aligned_ref_logprobs,
                                               near.aligned_alt_logprobs, strict=True) if abs(p - site) <= delta_radius)
        assert near.delta_radius == delta_radius and near.delta == pytest.approx(by_hand, abs=1e-6)
        assert near.frame_deltas != whole.frame_deltas
        assert passes.delta(method, delta_radius) == pytest.approx(near.delta, abs=1e-9)
    # an indel's radius is counted from the bases it touches: GCC deleted from TGCCGT (30-35) is CCG deleted,
    # so it touches 31-34 wherever it is written, and the delta is the mean over both placements
    deletion = score_variant(compact, SEQ, f"30:{SEQ[29:33]}>{SEQ[29]}", window=60, method=method, delta_radius=2)
    assert (deletion.touched_start, deletion.touched_end) == (31, 34)
    ref, alt, first = deletion.ref_logprobs, deletion.alt_logprobs, deletion.window_start

    def paired(deleted: range) -> float:  # the columns within 29-36 both alleles have, with `deleted` gone
        return sum(alt[p - first - (len(deleted) if p > deleted.stop - 1 else 0)] - ref[p - first]
                   for p in range(29, 37) if p not in deleted)

    assert deletion.delta == pytest.approx((paired(range(31, 34)) + paired(range(32, 35))) / 2, abs=1e-6)
    with pytest.raises(InputError, match="radius"):
        score_variant(compact, SEQ, variant, window=60, delta_radius=-1)


def test_a_model_measured_within_a_radius_is_read_within_it_everywhere(compact_model_dir, tmp_path):
    """The radius a model's card names is every path's default (the tab, a scan, a batch at coordinates),
    and a scan within it re-reads only the tokens it reaches, with the deltas of the Variant tab."""
    measured = tmp_path / "measured"
    shutil.copytree(compact_model_dir, measured)
    (measured / "eval.json").write_text(json.dumps({"quality": {"method": "chain", "window": 60, "delta_radius": 7}}))
    bundle = load_bundle(str(measured))
    own = score_variant(bundle, SEQ, "21:G>A", window=60)
    assert bundle.card.delta_radius == 7 and own.delta_radius == 7
    assert own.delta == score_variant(bundle, SEQ, "21:G>A", window=60, delta_radius=7).delta
    whole_window = score_variant(bundle, SEQ, "21:G>A", window=60, delta_radius=None)
    assert own.delta != pytest.approx(whole_window.delta, abs=1e-3)
    scan = scan_substitutions(bundle, SEQ, 18, 30, window=60)
    assert scan.delta_radius == 7
    for pos, ref, alt, delta in scan.rows()[::2]:
        assert delta == pytest.approx(score_variant(bundle, SEQ, f"{pos}:{ref}>{alt}", window=60).delta,
                                      abs=1e-4), (pos, alt)
    whole = scan_substitutions(bundle, SEQ, 18, 30, window=60, delta_radius=None)
    assert whole.delta_radius is None and not np.allclose(whole.deltas, scan.deltas, equal_nan=True)
    fasta = tmp_path / "g.fa"
    fasta.write_text(">c\n" + SEQ + "\n")
    at_coordinates = score_batch(bundle, Reference(fasta, "g"), [parse_genomic("c:21:G>A")], window=60)[0]
    assert at_coordinates.delta == pytest.approx(own.delta, abs=1e-4)


@pytest.mark.parametrize("variant", ["18:T>A", "57:GA>G", "90:C>CTT"])
def test_a_scores_record_is_plain_json_as_its_download_writes_it(compact, variant):
    scored = score_variant(compact, SEQ, variant, window=51, strand_average=True)
    data = json.loads(json.dumps(scored.to_dict()))
    assert data["delta"] == pytest.approx(scored.delta) and isinstance(data["clear_effect"], bool)
    assert data["given"] == variant and data["variant"] == str(scored.variant)
