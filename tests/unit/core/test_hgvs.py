"""Variants named in HGVS (c. on a coding sequence, g. on the sequence), read with mavehgvs's grammar: each name
placed on the HBB example on both strands, round trips with the names the app writes, and clear refusals."""

from __future__ import annotations

import json
import random

import pytest

from carbon_app.assets import ASSETS
from carbon_app.core.coding import CodingSequence
from carbon_app.core.dna import read_fasta, reverse_complement
from carbon_app.errors import InputError
from carbon_app.inference.score import Variant

HBB = read_fasta(ASSETS / "examples" / "hbb.fa").sequence
EXONS = [(1187, 1278), (1409, 1631), (2482, 2610)]  # HBB's three coding exons on the example, 1-based
CDS_TEXT = json.loads((ASSETS / "examples" / "hbb.json").read_text())["hbb_cds"]


def plus_strand():
    return HBB, CodingSequence.parse(CDS_TEXT, HBB)


def minus_strand():
    """The same gene on the other strand: the sequence reverse-complemented, its exons mirrored."""
    flipped, n = reverse_complement(HBB), len(HBB)
    exons = ",".join(f"{n - last + 1}..{n - first + 1}" for first, last in reversed(EXONS))
    return flipped, CodingSequence.parse(f"complement({exons})", flipped)


@pytest.mark.parametrize("name, expected", [
    ("c.20A>T", "1206:A>T"),  # HbS
    ("c.19G>A", "1205:G>A"),  # HbC
    ("c.92+1G>A", "1279:G>A"),  # IVS-I-1, counted into intron 1 from the exon's last base
    ("c.93-1G>A", "1408:G>A"),  # counted back from the next exon's first base
    ("c.20del", "1205:GA>G"),  # a deletion anchored on the base before it, as VCF writes it
    ("c.19_20del", "1204:TGA>T"),
    ("c.19_20insT", "1205:G>GT"),
    ("c.20dup", "1206:A>AA"),
    ("c.20delinsTT", "1206:A>TT"),
    ("c.*3del", "2612:CT>C"),  # past the stop codon
    ("g.1206A>T", "1206:A>T"),  # plain bases of the sequence itself
    ("g.1206_1208del", "1205:GAGG>G"),
])
def test_a_name_on_the_plus_strand_is_the_change_it_describes(name, expected):
    sequence, cds = plus_strand()
    variant = Variant.parse(name, sequence, cds)
    assert str(variant) == expected and variant.hgvs == name and variant.label == f"{name} ({expected})"


def test_a_c_name_on_a_minus_strand_cds_reads_its_bases_on_that_strand():
    plus, plus_cds = plus_strand()
    minus, minus_cds = minus_strand()
    for name in ("c.20A>T", "c.92+1G>A", "c.93-1G>A", "c.19G>A", "c.*3del", "c.20delinsTT", "c.19_20insT"):
        on_plus, on_minus = Variant.parse(name, plus, plus_cds), Variant.parse(name, minus, minus_cds)
        # the same change to the gene: both strands' edited sequences are each other's reverse complement
        edited_plus = plus[: on_plus.pos - 1] + on_plus.alt + plus[on_plus.pos - 1 + len(on_plus.ref):]
        edited_minus = minus[: on_minus.pos - 1] + on_minus.alt + minus[on_minus.pos - 1 + len(on_minus.ref):]
        assert edited_minus == reverse_complement(edited_plus), name
        assert minus_cds.change_consequence(minus, on_minus.pos - 1, on_minus.ref, on_minus.alt) == \
            plus_cds.change_consequence(plus, on_plus.pos - 1, on_plus.ref, on_plus.alt), name


@pytest.mark.parametrize("strand", [plus_strand, minus_strand])
def test_the_c_names_the_app_writes_read_back_as_the_same_change(strand):
    """Every change the consequence table names (substitutions and deletions, in exons, introns and UTRs)
    parses back from its own c. name to the very same change."""
    sequence, cds = strand()
    rng = random.Random(7)
    lo, hi = min(cds.positions) - 30, max(cds.positions) + 30
    for _ in range(60):
        pos0 = rng.randrange(lo, hi)
        if rng.random() < 0.6:
            ref = sequence[pos0]
            alt = rng.choice([b for b in "ACGT" if b != ref])
        else:  # a deletion of 1-4 bases after an anchor
            ref, alt = sequence[pos0 : pos0 + 1 + rng.randint(1, 4)], sequence[pos0]
        name = cds.change_consequence(sequence, pos0, ref, alt).hgvs_c
        back = Variant.parse(name, sequence, cds)
        edited = sequence[:pos0] + alt + sequence[pos0 + len(ref):]
        assert sequence[: back.pos - 1] + back.alt + sequence[back.pos - 1 + len(back.ref):] == edited, name


@pytest.mark.parametrize("name, coding, message", [
    ("c.20A>T", False, "counted on a coding sequence .* none is given"),
    ("c.20G>T", True, "reference base is G, but the sequence has A"),
    ("c.91+1G>A", True, "not the last base of an exon"),
    ("c.5000A>T", True, "beyond the coding sequence's 444 bases"),
    ("c.-5000A>T", True, "outside the 3,000-base sequence"),
    ("p.Glu7Val", True, "protein change"),
    ("n.20A>T", True, "n. name"),
    ("c.[20A>T;30G>C]", True, "several variants"),
    ("c.=", True, "unchanged"),
    ("c.20A>A", True, "changes nothing"),
    ("c.19_21insA", True, "not an HGVS name this reads"),
    ("NM_000518.5:c.20A>T", True, "names a reference sequence .*write c.20A>T"),
    ("g.1206+1A>T", True, "not an HGVS name this reads"),  # g. positions are plain bases
    ("c.20_21ins" + "A" * 3000, True, "at most 2,000"),
])
def test_a_name_that_cannot_be_placed_is_refused_naming_why(name, coding, message):
    sequence, cds = plus_strand()
    with pytest.raises(InputError, match=message):
        Variant.parse(name, sequence, cds if coding else None)
