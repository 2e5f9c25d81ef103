"""Held-out variant sets with a known expected effect, drawn from annotated genes never trained on.

- coding: stop-gain versus synonymous single-base substitutions inside the
  CDS of held-out transcripts (the start and stop codons excluded), both kinds
  drawn from the same genes (equal numbers per gene), translated with
  Biopython's standard table;
- splice: substitutions of the canonical GT (donor) and AG (acceptor)
  dinucleotides of held-out introns versus deep-intronic substitutions (at
  least `DEEP_INTRONIC` bases from either end of the same introns), matched
  pair by pair: each control has the REF and ALT of a splice-site SNV of its
  intron, so the two sets make the same base changes and differ only in
  where they are; again in equal numbers per gene.

A variant is a forward-strand position in its record (1-based, VCF style)
with REF and ALT on that strand, so it is scored exactly as a user's variant
at genome coordinates would be. Each keeps up to CONTEXT bases of its record
on either side (`context`, the variant at `context_pos`), so the evaluation
needs no genome.
"""

from __future__ import annotations

import random
from collections import defaultdict

from Bio.Data.CodonTable import standard_dna_table

from ..core.dna import reverse_complement
from .annotation import Transcript

DEEP_INTRONIC = 100
PER_GENE = 4  # of each kind, so that no single long gene dominates a set
PER_GROUP = 100  # of each kind
CONTEXT = 1000  # bases kept on each side of a variant, enough for a centred 1,200-base window in every frame
_STOPS = set(standard_dna_table.stop_codons)
_CODE = standard_dna_table.forward_table


def _complete_cds(transcript: Transcript, genome: str) -> str | None:
    """The CDS when it is a whole, clean open reading frame (ATG ... stop, no stop inside), else None (and
    None for a CDS inferred from the longest ORF: a held-out set is read from the annotation only)."""
    if transcript.cds_inferred:
        return None
    cds = transcript.spliced(genome, transcript.cds)
    if not cds or len(cds) % 3 or len(cds) < 9 or set(cds) - set("ACGT") or not cds.startswith("ATG"):
        return None
    codons = [cds[i : i + 3] for i in range(0, len(cds), 3)]
    if codons[-1] not in _STOPS or any(c in _STOPS for c in codons[:-1]):
        return None
    return cds


def _forward(transcript: Transcript, position: int, ref: str, alt: str) -> dict:
    """A variant given on the transcript's strand, restated on the record's forward strand."""
    if transcript.strand == -1:
        ref, alt = reverse_complement(ref), reverse_complement(alt)
    return {"pos": position + 1, "ref": ref, "alt": alt, "gene": transcript.gene}


def coding_variants(transcript: Transcript, genome: str) -> dict[str, list[dict]]:
    """Every stop-gain and synonymous SNV of the transcript's CDS."""
    cds = _complete_cds(transcript, genome)
    found: dict[str, list[dict]] = {"stop_gain": [], "synonymous": []}
    if cds is None:
        return found
    where = transcript.positions(transcript.cds)
    for i in range(3, len(cds) - 3):  # not the start codon, not the stop codon
        codon_at = i - i % 3
        codon = cds[codon_at : codon_at + 3]
        for alt in "ACGT":
            if alt == cds[i]:
                continue
            mutant = codon[: i % 3] + alt + codon[i % 3 + 1 :]
            kind = "stop_gain" if mutant in _STOPS else "synonymous" if _CODE[mutant] == _CODE[codon] else None
            if kind:
                found[kind].append(_forward(transcript, where[i], cds[i], alt))
    return found


def splice_variants(transcript: Transcript, genome: str, rng: random.Random) -> dict[str, list[dict]]:
    """SNVs of the canonical splice dinucleotides of the transcript's canonical GT-AG introns, each with a
    matched deep-intronic SNV of the same intron (same REF, same ALT, a position drawn at random among the
    deep ones holding that base): the two lists are pairs, index by index."""
    found: dict[str, list[dict]] = {"splice_site": [], "deep_intronic": []}
    for start, end in transcript.introns():
        intron = transcript.spliced(genome, [(start, end)])
        if not (intron.startswith("GT") and intron.endswith("AG")) or set(intron) - set("ACGT"):
            continue
        where = transcript.positions([(start, end)])
        deep_by_base: dict[str, list[int]] = defaultdict(list)
        for i in range(DEEP_INTRONIC, len(intron) - DEEP_INTRONIC):
            deep_by_base[intron[i]].append(i)
        for site in (0, 1, len(intron) - 2, len(intron) - 1):
            free = deep_by_base[intron[site]]
            if not free:
                continue
            deep = free.pop(rng.randrange(len(free)))
            for alt in "ACGT":
                if alt != intron[site]:
                    found["splice_site"].append(_forward(transcript, where[site], intron[site], alt))
                    found["deep_intronic"].append(_forward(transcript, where[deep], intron[deep], alt))
    return found


def _sample(kinds: dict[str, list[dict]], n: int, rng: random.Random, paired: bool) -> dict[str, list[dict]]:
    """n of each kind; for paired kinds the same indices of each, so that pairs stay whole."""
    if not paired:
        return {kind: rng.sample(variants, n) for kind, variants in kinds.items()}
    chosen = rng.sample(range(min(len(v) for v in kinds.values())), n)
    return {kind: [variants[i] for i in chosen] for kind, variants in kinds.items()}


def balanced(per_gene: dict[str, dict[str, list[dict]]], rng: random.Random, paired: bool = False) -> list[dict]:
    """Equal numbers of both kinds from each gene (at most PER_GENE), then at most PER_GROUP of each kind."""
    chosen: dict[str, list[dict]] = defaultdict(list)
    for gene in sorted(per_gene):
        kinds = per_gene[gene]
        n = min(PER_GENE, *(len(v) for v in kinds.values()))
        for kind, variants in _sample(kinds, n, rng, paired).items():
            chosen[kind] += variants
    n = min(PER_GROUP, *(len(v) for v in chosen.values())) if chosen else 0
    return [dict(v, kind=kind) for kind, variants in sorted(_sample(chosen, n, rng, paired).items())
            for v in variants]


def held_out_variant_sets(records, rng: random.Random) -> dict[str, list[dict]]:
    """{"coding": [...], "splice": [...]}: each variant with its record, group and species.

    One transcript per gene and task: the one with the longest CDS (coding)
    or the most introns (splice), among transcripts wholly in the test part.
    """
    sets: dict[str, list[dict]] = {"coding": [], "splice": []}
    tasks = (("coding", coding_variants, lambda t: sum(e - s for s, e in t.cds)),
             ("splice", lambda t, genome: splice_variants(t, genome, rng), lambda t: len(t.exons)))
    for task, collect, best in tasks:
        by_group: dict[str, dict[str, dict]] = defaultdict(dict)
        for record in records:
            genes: dict[str, Transcript] = {}
            for transcript in record.transcripts:
                if record.part_of(transcript) == "test" and (
                        transcript.gene not in genes or best(transcript) > best(genes[transcript.gene])):
                    genes[transcript.gene] = transcript
            for gene, transcript in genes.items():
                found = collect(transcript, record.seq)
                if all(found.values()):
                    tagged = {kind: [dict(v, record=record.id, group=record.group, species=record.species,
                                          genome=record.seq)
                                     for v in variants] for kind, variants in found.items()}
                    by_group[record.group][f"{record.id}:{gene}"] = tagged
        for group in sorted(by_group):
            sets[task] += balanced(by_group[group], rng, paired=task == "splice")
    for variant in (v for found in sets.values() for v in found):
        genome, at = variant.pop("genome"), variant["pos"] - 1
        lo = max(at - CONTEXT, 0)
        variant["context"] = genome[lo : at + len(variant["ref"]) + CONTEXT]
        variant["context_pos"] = at - lo + 1
    return sets
