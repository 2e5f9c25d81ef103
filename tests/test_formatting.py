"""What the page says about a result: the verdict follows the frames, the trust note the model's own card."""

from __future__ import annotations

import dataclasses
import json

from carbon_app.app import formatting as fmt
from carbon_app.inference.score import score_variant
from carbon_app.model.bundle import load_bundle

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
    assert "ships no held-out variant-effect measurement" in fmt.trust_note(bundle)
    measured = tmp_path / "measured"
    measured.mkdir()
    for f in compact_model_dir.iterdir():
        (measured / f.name).write_bytes(f.read_bytes())
    (measured / "eval.json").write_text(json.dumps({"quality": {
        "demo": True, "stop_gain_vs_synonymous_auroc": 0.61, "splice_site_vs_deep_intronic_auroc": 0.42,
        "random_snv_fraction_negative": 0.6, "window": 1200}}))
    note = fmt.trust_note(load_bundle(str(measured)))
    assert "**demo model**" in note and "AUROC 0.61" in note and "AUROC 0.42" in note and "1,200-base" in note


def test_model_sizes_read_as_people_write_them():
    assert fmt.parameters(5_482_752) == "5.5M" and fmt.parameters(3_012_345_678) == "3.01B"
