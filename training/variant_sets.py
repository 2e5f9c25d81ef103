"""Variant sets with a known expected effect, drawn from annotated genes never trained on: the test
part's (the held-out sets every card reports) and the validation part's (what a choice between models,
such as a merge's weight, is made on, so that the test sets stay unread until the end).

- coding: stop-gain versus synonymous single-base substitutions inside the
  CDS of held-out transcripts (the start and stop codons excluded), both kinds
  drawn from the same genes (equal numbers per gene), translated with
  Biopython's standard table;
- splice: substitutions of the canonical GT (donor) and AG (acceptor)
  dinucleotides of held-out introns versus deep-intronic substitutions (at
  least `DEEP_INTRONIC` bases from either end of the same introns), matched
  pair by pair: each control has the REF and ALT of a splice-site SNV of its
  intron, so the two sets make the same base changes and differ only in
  where they are; again in equal numbers per gene;
- splice_matched: for each splice-site SNV of that set, a deep-intronic SNV
  of the same intron that breaks the same dinucleotide the same way (a G of a
  GT, say, to the same ALT), drawn from its own random stream: a model that
  merely favours GT and AG everywhere scores the two alike, so only knowing
  the site tells them apart (`splice_dinucleotide_change`).

A variant is a forward-strand position in its record (1-based, VCF style)
with REF and ALT on that strand, so it is scored exactly as a user's variant
at genome coordinates would be. Each keeps up to CONTEXT bases of its record
on either side (`context`, the variant at `context_pos`), so the evaluation
needs no genome.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict

from Bio.Data.CodonTable import standard_dna_table

from carbon_app.core.dna import reverse_complement

from .annotation import Transcript

DEEP_INTRONIC = 100
PER_GENE = 4  # of each kind, so that no single long gene dominates a set
PER_GROUP = 100  # of each kind
CONTEXT = 1000  # bases kept on each side of a variant, enough for a centred 1,200-base window in every frame
# a canonical splice dinucleotide (an intron's GT or AG) as the forward strand shows it, on either strand
SPLICE_DINUCLEOTIDES = frozenset({"GT", "AG", reverse_complement("GT"), reverse_complement("AG")})
_STOPS = set(standard_dna_table.stop_codons)
_CODE = standard_dna_table.forward_table


def _complete_cds(transcript: Transcript, genome: str, inferred_ok: bool = False) -> str | None:
    """The CDS when it is a whole, clean open reading frame (ATG ... stop, no stop inside), else None (and
    None for a CDS inferred from the longest ORF unless `inferred_ok`: a test set is read from the
    annotation only)."""
    if transcript.cds_inferred and not inferred_ok:
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


def coding_variants(transcript: Transcript, genome: str, inferred_ok: bool = False) -> dict[str, list[dict]]:
    """Every stop-gain and synonymous SNV of the transcript's CDS (an inferred one too with `inferred_ok`)."""
    cds = _complete_cds(transcript, genome, inferred_ok)
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


def _occurrences(sequence: str, motif: str) -> list[int]:
    """Where `motif` starts in `sequence`, overlaps included."""
    return [m.start() for m in re.finditer(f"(?={motif})", sequence)]


def splice_variants(transcript: Transcript, genome: str, rng: random.Random) -> dict[str, list[dict | None]]:
    """SNVs of the canonical splice dinucleotides of the transcript's canonical GT-AG introns, each with a
    matched deep-intronic SNV of the same intron (same REF, same ALT, a position drawn at random among the
    deep ones holding that base) and a dinucleotide-matched one (the same base of the same dinucleotide,
    GT or AG, deep in the intron, the same ALT; None where the intron has no such dinucleotide deep in
    it). The lists line up index by index. The dinucleotide-matched draws take their own random stream
    (seeded by the intron), so that they leave the other two sets as they were."""
    found: dict[str, list[dict | None]] = {"splice_site": [], "deep_intronic": [], "deep_same_dinucleotide": []}
    for start, end in transcript.introns():
        intron = transcript.spliced(genome, [(start, end)])
        if not (intron.startswith("GT") and intron.endswith("AG")) or set(intron) - set("ACGT"):
            continue
        where = transcript.positions([(start, end)])
        deep_by_base: dict[str, list[int]] = defaultdict(list)
        for i in range(DEEP_INTRONIC, len(intron) - DEEP_INTRONIC):
            deep_by_base[intron[i]].append(i)
        # (site, offset of its dinucleotide's first base): the donor's G and T, the acceptor's A and G
        sites = ((0, 0), (1, -1), (len(intron) - 2, 0), (len(intron) - 1, -1))
        own = random.Random(f"{transcript.gene}:{start}-{end}")
        for site, offset in sites:
            free = deep_by_base[intron[site]]
            if not free:
                continue
            deep = free.pop(rng.randrange(len(free)))
            dinucleotide = intron[site + offset : site + offset + 2]
            alike = [found_at - offset for found_at in _occurrences(intron, dinucleotide)
                     if DEEP_INTRONIC <= found_at - offset < len(intron) - DEEP_INTRONIC]
            matched = own.choice(alike) if alike else None
            for alt in "ACGT":
                if alt != intron[site]:
                    found["splice_site"].append(_forward(transcript, where[site], intron[site], alt))
                    found["deep_intronic"].append(_forward(transcript, where[deep], intron[deep], alt))
                    found["deep_same_dinucleotide"].append(
                        None if matched is None else _forward(transcript, where[matched], intron[matched], alt))
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
            for v in variants if v is not None]


def variant_sets(records, rng: random.Random, part: str = "test") -> dict[str, list[dict]]:
    """{"coding": [...], "splice": [...], "splice_matched": [...]}: each variant with its record, group
    and species.

    One transcript per gene and task: the one with the longest CDS (coding)
    or the most introns (splice), among transcripts wholly in `part`
    ("test" or "validation"; a held-out record is test data whole). The
    validation coding set also reads CDSs inferred as the longest ORF (the
    human exon table's genes, whose inference agrees with the annotation at
    99.5% of bases where both exist: `data_card.json`), so that the human
    genes have a validation set; the test sets read annotated CDSs only.
    """
    sets: dict[str, list[dict]] = {"coding": [], "splice": [], "splice_matched": []}
    tasks = (("coding", lambda t, genome: coding_variants(t, genome, inferred_ok=part == "validation"),
              lambda t: sum(e - s for s, e in t.cds)),
             ("splice", lambda t, genome: splice_variants(t, genome, rng), lambda t: len(t.exons)))
    for task, collect, best in tasks:
        by_group: dict[str, dict[str, dict]] = defaultdict(dict)
        for record in records:
            genes: dict[str, Transcript] = {}
            for transcript in record.transcripts:
                if record.part_of(transcript) == part and (
                        transcript.gene not in genes or best(transcript) > best(genes[transcript.gene])):
                    genes[transcript.gene] = transcript
            for gene, transcript in genes.items():
                found = collect(transcript, record.seq)
                if all(found.values()):  # (a dinucleotide-matched list of Nones is no reason to drop a gene)
                    tagged = {kind: [None if v is None else dict(v, record=record.id, group=record.group,
                                                                  species=record.species, genome=record.seq)
                                     for v in variants] for kind, variants in found.items()}
                    by_group[record.group][f"{record.id}:{gene}"] = tagged
        for group in sorted(by_group):
            chosen = balanced(by_group[group], rng, paired=task == "splice")
            sets[task] += [v for v in chosen if v["kind"] != "deep_same_dinucleotide"]
            sets["splice_matched"] += [v for v in chosen if v["kind"] == "deep_same_dinucleotide"]
    for variant in (v for found in sets.values() for v in found):
        genome, at = variant.pop("genome"), variant["pos"] - 1
        lo = max(at - CONTEXT, 0)
        variant["context"] = genome[lo : at + len(variant["ref"]) + CONTEXT]
        variant["context_pos"] = at - lo + 1
    return sets


def splice_dinucleotide_change(variant: dict) -> int:
    """How many canonical splice dinucleotides (GT or AG, on either strand) an SNV makes (> 0) or breaks (< 0)
    with its neighbours. A model that favours GT and AG wherever it cannot tell a splice site from its
    surroundings reads a made one as benign and a broken one as damaging, whatever the variant's kind."""
    context, at = variant["context"], variant["context_pos"] - 1
    altered = context[:at] + variant["alt"] + context[at + 1 :]

    def count(sequence: str) -> int:
        return sum(sequence[i : i + 2] in SPLICE_DINUCLEOTIDES for i in (at - 1, at) if i >= 0)

    return count(altered) - count(context)


def splice_dinucleotide_shares(variants: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """{group: {kind: {"makes": share, "keeps": share, "breaks": share}}}: how often each kind of SNV makes,
    keeps or breaks a splice dinucleotide (`splice_dinucleotide_change`), which tells how far a set's
    AUROC can be moved by a model's liking for GT and AG alone."""
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for variant in variants:
        counts[variant["group"]][variant["kind"]].append(splice_dinucleotide_change(variant))
    return {group: {kind: {"makes": sum(c > 0 for c in changes) / len(changes),
                           "keeps": sum(c == 0 for c in changes) / len(changes),
                           "breaks": sum(c < 0 for c in changes) / len(changes)}
                    for kind, changes in sorted(kinds.items())}
            for group, kinds in sorted(counts.items())}
