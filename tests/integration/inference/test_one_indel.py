"""One indel, one score, however it is written: every placement of an insertion or deletion along the repeat it
lies in, as POS:REF>ALT and as an HGVS g. name, gets one normal form and one delta.

The equivalent writings are found by brute force (every position where deleting, or inserting, the same
number of bases gives the same alternate sequence), not by the code under test."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess

import pytest

from carbon_app.core.dna import read_fasta
from carbon_app.inference.score import score_variant
from tests.conftest import REPO
from tests.indel_writings import writings

HBB = read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence


@pytest.mark.integration  # some 40 scores at the model's own setup: a minute or two
def test_the_hbb_runs_get_one_delta_each_whatever_the_placement(demo):
    """The T-run at 1836-1844 and the A-run at 1931-1939 of the worked example: one base deleted or inserted,
    written at every placement (VCF form), each scored at the model's own setup."""
    table = {}
    for run, base in ((range(1836, 1845), "T"), (range(1931, 1940), "A")):
        deletion = HBB[: run.start - 1] + HBB[run.start :]
        insertion = HBB[: run.start - 1] + base + HBB[run.start - 1 :]
        for kind, alternate in (("del", deletion), ("ins", insertion)):
            every = [w for w in writings(HBB, alternate) if not w.startswith("g.")]
            deltas = {w: score_variant(demo, HBB, w).delta for w in every}
            table[f"{base}{kind}"] = deltas
            assert max(deltas.values()) - min(deltas.values()) < 1e-4, json.dumps(deltas, indent=1)
    assert len(table["Tdel"]) == 9 and len(table["Adel"]) == 9 and len(table["Tins"]) == 10


def _repeat_changes(sequence: str, count: int, seed: int) -> list[tuple[int, str, str]]:
    """`count` (POS, REF, ALT) changes in the repeats of `sequence` (runs of a 1-3 base unit, two copies or
    more), each written at a random placement along its run with a random anchor: a unit deleted or inserted,
    or a multi-base change with shared bases at its ends."""
    rng = random.Random(seed)
    runs = [(m.start(), m.group(2), m.group(1)) for size in (1, 2, 3)
            for m in re.finditer(rf"(?=(([ACGT]{{{size}}})\2+))", sequence) if len(m.group(1)) >= 3 * size]
    changes = []
    while len(changes) < count:
        start, unit, run = rng.choice(runs)
        at = start + rng.randrange(0, len(run) - len(unit) + 1)
        if at < 1 or at + len(unit) + 1 >= len(sequence):
            continue
        kind = rng.choice(["del", "ins", "mnv"])
        if kind == "del":
            changes.append((at, sequence[at - 1 : at + len(unit)], sequence[at - 1]))
        elif kind == "ins":
            changes.append((at, sequence[at - 1], sequence[at - 1] + sequence[at : at + len(unit)]))
        else:
            middle = sequence[at]
            other = rng.choice([b for b in "ACGT" if b != middle])
            changes.append((at, sequence[at - 1 : at + 2], sequence[at - 1] + other + sequence[at + 1]))
    return changes


@pytest.mark.skipif(shutil.which("bcftools") is None, reason="Debian's bcftools is not installed (.ci/run installs it)")
def test_the_normal_forms_a_scored_vcf_carries_are_bcftools_norms(compact, tmp_path):
    """A VCF of indels and multi-base changes written anywhere along the worked example's repeats: the
    CARBON_NORMAL of every ALT equals the record `bcftools norm -f` writes for it."""
    import pysam

    from carbon_app.genome.reference import Reference
    from carbon_app.genome.vcf import NORMAL, score_vcf
    from carbon_app.inference.spec import resolve_spec

    fasta = REPO / "assets" / "examples" / "hbb.fa"
    contig = fasta.read_text().split()[0][1:]
    changes = sorted(_repeat_changes(HBB, 120, seed=93))
    lines = ["##fileformat=VCFv4.2", f"##contig=<ID={contig},length={len(HBB)}>",
             "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    lines += [f"{contig}\t{pos}\tv{i}\t{ref}\t{alt}\t.\t.\t." for i, (pos, ref, alt) in enumerate(changes)]
    vcf = tmp_path / "repeats.vcf"
    vcf.write_text("\n".join(lines) + "\n")
    normed = subprocess.run(["bcftools", "norm", "-f", str(fasta), str(vcf)], capture_output=True, text=True,
                            check=True).stdout
    expected = {fields[2]: f"{fields[1]}:{fields[3]}>{fields[4]}"
                for fields in (line.split("\t") for line in normed.splitlines() if not line.startswith("#"))}
    spec = resolve_spec(compact, window=60, frames=1, strand_average=False)
    score_vcf(compact, Reference(fasta), vcf, tmp_path / "out.vcf.gz", tmp_path / "out.tsv", spec=spec)
    with pysam.VariantFile(str(tmp_path / "out.vcf.gz")) as out:
        ours = {record.id: record.info[NORMAL][0] for record in out}
    assert len(ours) == len(changes) and ours == expected
    moved = sum(f"{pos}:{ref}>{alt}" != expected[f"v{i}"] for i, (pos, ref, alt) in enumerate(changes))
    assert moved > len(changes) // 2  # most were written away from their normal form
