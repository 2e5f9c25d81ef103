"""The design check report: a coding design is read in the frame its ATG sets, and a premature stop fails it."""

from __future__ import annotations

from carbon_app.inference.checks import report

HBB_START = "ATGGTGCATCTGACTCCTGAGGAG"  # HBB codons 1-8, an ATG-started coding prompt (24 bases)


def test_a_continuation_of_a_coding_prompt_is_read_in_the_prompts_frame():
    fine = report("AAGTCTGCCGTTACTGCC", 18, prompt=HBB_START)
    assert fine.coding_frame == "prompt" and fine.in_frame_stops == [] and fine.coding_ok
    assert fine.frame_protein == "KSAVTA"
    broken = report("AAGTAAGCCGTTTGA", 15, prompt=HBB_START)  # TAA at design 4-6, TGA as its last codon
    assert broken.in_frame_stops == [4] and broken.coding_ok is False


def test_a_prompt_ending_mid_codon_carries_its_frame_into_the_design():
    prompt = HBB_START + "T"  # 25 bases: T opens codon 9, the design's first two bases close it
    stop_across = report("AAGCCGTT", 8, prompt=prompt)  # T|AA: a stop made of prompt and design bases
    assert stop_across.in_frame_stops == [1] and stop_across.coding_ok is False
    assert report("CCGCCGTT", 8, prompt=prompt).in_frame_stops == []  # T|CC, then GCC GTT: no stop
    assert report("CCGCCGTT", 8, prompt=prompt).frame_protein == "AV"


def test_a_template_starting_with_atg_fails_on_a_stop_inside_but_not_on_its_final_stop():
    ends_well = report("ATGAAACCCGGGTAA", 15, mask="ATGNNNNNNNNNTAA")
    assert ends_well.coding_frame == "mask" and ends_well.frame_start == 1 and ends_well.coding_ok
    assert report("ATGAAACCCGGGTAA", 15).coding_frame == "design"  # no mask: its own ATG
    inside = report("ATGAAATAGGGGCCCTAA", 18, mask="ATGNNNNNNNNNNNNTAA")
    assert inside.in_frame_stops == [7] and inside.coding_ok is False
    # the longest ORF of any frame is still reported, but it no longer hides the failure
    assert inside.orf_length_aa >= 0 and inside.to_dict()["coding_ok"] is False


def test_a_design_with_no_atg_start_is_not_judged_as_coding():
    plain = report("CCCTAAGGG", 9)
    assert plain.coding_frame is None and plain.coding_ok is None and plain.in_frame_stops is None


KOZAK_MASK = "GCCACCATGG" + "N" * 17 + "TAA"  # a Kozak and start the mask fixes at 7, a stop at the end (30 bases)


def test_a_start_the_mask_fixes_sets_the_frame_and_an_open_one_is_a_cds_in_genbank(demo):
    import dataclasses

    from Bio import SeqIO

    from carbon_app.app.exports import designs_genbank
    from carbon_app.app.formatting import report_markdown
    from carbon_app.inference.generate import generate

    open_frame = "GCCACCATGGCTGCAAAAGGTGGAGCCTAA"  # M A A K G G A *, from 7 through the mask's TAA
    stop_inside = "GCCACCATGGCTTAAAAAGGTGGAGCCTAA"  # TAA at 13: a premature stop in that frame
    fine, broken = report(open_frame, 30, mask=KOZAK_MASK), report(stop_inside, 30, mask=KOZAK_MASK)
    assert (fine.coding_frame, fine.frame_start, fine.in_frame_stops, fine.coding_ok) == ("mask", 7, [], True)
    assert fine.frame_protein == "MAAKGGA*" and broken.in_frame_stops == [13] and broken.coding_ok is False
    shown = report_markdown([{**fine.to_dict(), "total": -40.0, "rank": 1}])
    assert "open in the frame of the ATG the mask fixes at 7" in shown and "not coding" not in shown
    made = generate(demo, "", 30, mask=KOZAK_MASK, seed=1)
    made = dataclasses.replace(made, sequences=[open_frame, stop_inside])
    reports = [fine.to_dict(), broken.to_dict()]
    import io

    records = list(SeqIO.parse(io.StringIO(designs_genbank(made, reports)), "genbank"))
    cds = [[f for f in record.features if f.type == "CDS"] for record in records]
    assert [(int(f.location.start), int(f.location.end)) for f in cds[0]] == [(6, 30)]
    assert cds[0][0].qualifiers["translation"] == ["MAAKGGA"] and cds[1] == []  # no CDS over a broken frame


def test_a_low_complexity_stretch_is_flagged_in_the_checks_and_beside_the_rank():
    from carbon_app.app.formatting import report_markdown
    from carbon_app.inference.checks import low_complexity, tandem_repeat

    repeat = "ACGGATCC" + "TG" * 13 + "ACCGTAGT"
    assert tandem_repeat(repeat) == (8, 34, "TG") and low_complexity(repeat) == "(TG)13 at 9-34"
    assert low_complexity("A" * 20) == "(A)20 at 1-20" and low_complexity("ACGTTGCAGGCTTACC") is None
    flagged = {**report(repeat, len(repeat)).to_dict(), "total": -30.0, "rank": 1}
    row = report_markdown([flagged]).splitlines()[2]
    assert "⚠ (TG)13 at 9-34" in row and "-30.00 (1 of 1) ⚠ repeat" in row
