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
    assert ends_well.coding_frame == "design" and ends_well.coding_ok
    inside = report("ATGAAATAGGGGCCCTAA", 18, mask="ATGNNNNNNNNNNNNTAA")
    assert inside.in_frame_stops == [7] and inside.coding_ok is False
    # the longest ORF of any frame is still reported, but it no longer hides the failure
    assert inside.orf_length_aa >= 0 and inside.to_dict()["coding_ok"] is False


def test_a_design_with_no_atg_start_is_not_judged_as_coding():
    plain = report("CCCTAAGGG", 9)
    assert plain.coding_frame is None and plain.coding_ok is None and plain.in_frame_stops is None
