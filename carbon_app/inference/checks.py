"""What a biologist checks first in a designed sequence: length, mask, GC, the reading frame, the longest ORF.

A design that continues a coding prompt (one that starts with ATG), or whose
own first bases are ATG (a coding template), is read in that frame: every
stop codon in it before the design's last codon is a failure, named by its
position, whatever longer ORF some other frame happens to hold.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from Bio.Seq import Seq

from ..core.dna import reverse_complement, satisfies
from ..errors import ScoresUnavailable


@dataclass
class SequenceReport:
    length: int
    expected_length: int
    mask_satisfied: bool | None  # None when no mask was given
    gc_content: float
    orf_start: int | None  # 1-based, on the reported strand's coordinates of the given sequence
    orf_end: int | None
    orf_strand: str | None  # "+" or "-"
    orf_length_aa: int
    orf_protein: str
    coding_frame: str | None = None  # "prompt" or "design": whose ATG sets the frame; None: not coding
    in_frame_stops: list[int] | None = None  # 1-based positions in the design of premature in-frame stops
    frame_protein: str = ""  # the design's bases translated in that frame

    @property
    def coding_ok(self) -> bool | None:
        """No premature stop in the coding frame (None when the design is not read as coding)."""
        return None if self.coding_frame is None else not self.in_frame_stops

    def to_dict(self) -> dict:
        return {**asdict(self), "coding_ok": self.coding_ok}


def longest_orf(seq: str, table: int = 1) -> tuple[int | None, int | None, str | None, str]:
    """Longest ATG..stop open reading frame on either strand (standard code), as
    (start, end, strand, protein); an ORF may run off the end of the sequence."""
    best: tuple[int | None, int | None, str | None, str] = (None, None, None, "")
    length = len(seq)
    for strand, text in (("+", seq), ("-", reverse_complement(seq))):
        for frame in range(3):
            usable = (length - frame) // 3 * 3
            protein = str(Seq(text[frame : frame + usable]).translate(table=table))
            aa = 0
            while aa < len(protein):
                if protein[aa] == "M":
                    stop = protein.find("*", aa)
                    stop = len(protein) if stop == -1 else stop
                    if stop - aa > len(best[3]):
                        begin, finish = frame + 3 * aa, frame + 3 * stop + (3 if stop < len(protein) else 0)
                        if strand == "+":
                            coords = (begin + 1, finish)
                        else:
                            coords = (length - finish + 1, length - begin)
                        best = (*coords, strand, protein[aa:stop])
                    aa = stop + 1
                else:
                    aa += 1
    return best


def coding_frame(seq: str, prompt: str = "", table: int = 1) -> tuple[str | None, list[int], str]:
    """(whose ATG sets the frame, premature in-frame stops as 1-based design positions, the design's
    codons translated) for a design continuing an ATG-started prompt or starting with ATG itself."""
    if prompt.startswith("ATG"):
        owner, offset = "prompt", -len(prompt) % 3  # design bases before its first whole codon
    elif seq.startswith("ATG"):
        owner, offset = "design", 0
    else:
        return None, [], ""
    usable = (len(seq) - offset) // 3 * 3
    protein = str(Seq(seq[offset : offset + usable]).translate(table=table))
    last = len(protein) - 1
    stops = [offset + 3 * i + 1 for i, aa in enumerate(protein) if aa == "*" and i < last]
    if owner == "prompt" and offset:  # the codon the prompt's last bases open runs into the design
        codon = prompt[len(prompt) - (3 - offset) :] + seq[:offset]
        if len(codon) == 3 and str(Seq(codon).translate(table=table)) == "*":
            stops.insert(0, 1)
    return owner, stops, protein


def report(seq: str, expected_length: int, mask: str | None = None, prompt: str = "") -> SequenceReport:
    gc = (seq.count("G") + seq.count("C")) / len(seq) if seq else 0.0
    start, end, strand, protein = longest_orf(seq)
    owner, stops, frame_protein = coding_frame(seq, prompt)
    return SequenceReport(
        length=len(seq),
        expected_length=expected_length,
        mask_satisfied=None if mask is None else satisfies(seq, mask),
        gc_content=gc,
        orf_start=start,
        orf_end=end,
        orf_strand=strand,
        orf_length_aa=len(protein),
        orf_protein=protein,
        coding_frame=owner,
        in_frame_stops=stops if owner else None,
        frame_protein=frame_protein,
    )


def design_likelihoods(bundle, result, flank: str = "") -> list[dict]:
    """Each design's log-likelihood under the model that made it (natural log, after its prompt and tags),
    with a downstream `flank` appended too when given (how a causal model sees the insert's far
    junction), ranked best first: [{design (1-based), ll_design, ll_flank, total, rank}] in design order."""
    from .score import score_sequence
    from .spec import context_room_bases

    tags = result.tags
    room = context_room_bases(bundle, tags)
    out = []
    for i, design in enumerate(result.sequences, start=1):
        text = (result.prompt + design + flank)[-room:]  # the prompt's start is dropped where it does not fit
        after = len(design) + len(flank)
        if after > len(text):
            out.append({"design": i, "ll_design": None, "ll_flank": None, "total": None})
            continue
        try:
            logprobs = score_sequence(bundle, text, tags=tags).logprobs
        except ScoresUnavailable as exc:  # the design stands; only its score is missing, and why
            out.append({"design": i, "ll_design": None, "ll_flank": None, "total": None, "ll_missing": str(exc)})
            continue
        own = logprobs[len(text) - after : len(text) - len(flank)]
        tail = logprobs[len(text) - len(flank) :] if flank else []
        out.append({"design": i, "ll_design": float(own.sum()), "ll_flank": float(sum(tail)) if flank else None,
                    "total": float(own.sum() + sum(tail))})
    ranked = sorted((row for row in out if row["total"] is not None), key=lambda row: -row["total"])
    for place, row in enumerate(ranked, start=1):
        row["rank"] = place
    return out


def design_reports(bundle, result, flank: str = "") -> list[dict]:
    """Everything checked on each design of a finished generation: the sequence report, each constraint's
    PASS/FAIL, and its log-likelihood under the model with its rank among the samples."""
    likelihoods = design_likelihoods(bundle, result, flank)
    out = []
    for seq, likelihood in zip(result.sequences, likelihoods, strict=True):
        row = report(seq, result.n_bases, result.mask, result.prompt).to_dict()
        checks = result.constraints.checks(seq, result.prompt) if result.constraints else []
        row["constraints"] = [check.to_dict() for check in checks]
        row.update(likelihood)
        out.append(row)
    return out
