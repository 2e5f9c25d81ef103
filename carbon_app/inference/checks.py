"""What a biologist checks first in a designed sequence: length, mask, GC, the reading frame, the longest ORF.

A design that continues a coding prompt (one that starts with ATG), whose mask
fixes an ATG (a Kozak-and-start template such as GCCACCATGG...TAA), or whose own
first bases are ATG, is read in that frame: every stop codon in it before the
design's last codon (and not fixed by the mask itself) is a failure, named by
its position, whatever longer ORF some other frame happens to hold.
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
    coding_frame: str | None = None  # "prompt", "mask" or "design": whose ATG sets the frame; None: not coding
    frame_start: int | None = None  # 1-based design position of the frame's first whole codon (the ATG's)
    in_frame_stops: list[int] | None = None  # 1-based positions in the design of premature in-frame stops
    frame_protein: str = ""  # the design's bases translated in that frame
    low_complexity: str | None = None  # the longest tandem repeat, where it is long enough to flag: "(TG)13 at 34-59"

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


LOW_COMPLEXITY_BASES = 16  # a tandem repeat this long (and of 3 copies at least) is flagged


def tandem_repeat(seq: str, longest_unit: int = 6) -> tuple[int, int, str] | None:
    """(start, end, unit) of the longest run of one unit of 1..`longest_unit` bases repeated back to back
    (0-based, half-open; its last copy may be partial), or None for a sequence without one: the low-complexity
    stretches ((TG)n, poly-A, satellite-like runs) a designer wants named before a design is ordered."""
    best: tuple[int, int, str] | None = None
    for unit in range(1, longest_unit + 1):
        run = 0
        for i in range(unit, len(seq) + 1):
            if i < len(seq) and seq[i] == seq[i - unit]:
                run += 1
                continue
            span = run + unit
            if run and span >= 2 * unit and (best is None or span > best[1] - best[0]):
                best = (i - span, i, seq[i - span : i - span + unit])
            run = 0
    return best


def low_complexity(seq: str) -> str | None:
    """The longest tandem repeat in words ("(TG)13 at 34-59", 1-based), where it spans LOW_COMPLEXITY_BASES
    bases and three copies or more; else None."""
    found = tandem_repeat(seq)
    if found is None:
        return None
    start, end, unit = found
    if end - start < max(LOW_COMPLEXITY_BASES, 3 * len(unit)):
        return None
    return f"({unit}){(end - start) // len(unit)} at {start + 1}-{end}"


def frame_owner(owner: str, frame_start: int | None = None) -> str:
    """Whose ATG sets a design's reading frame (`coding_frame`'s owner), in words, as the checks and the GenBank
    file name it: the mask's with the design position it fixes it at."""
    if owner == "prompt":
        return "the prompt's ATG"
    if owner == "mask":
        return f"the ATG the mask fixes at {frame_start or 1:,}"
    return "its own ATG"


def mask_start(mask: str | None) -> int | None:
    """0-based design position of the first ATG a mask fixes (its three bases given as A, T, G), or None."""
    found = (mask or "").upper().find("ATG")
    return None if found < 0 else found


def coding_frame(seq: str, prompt: str = "", table: int = 1, mask: str | None = None
                 ) -> tuple[str | None, list[int], str, int | None]:
    """(whose ATG sets the frame, premature in-frame stops as 1-based design positions, the design's
    codons translated from that frame's first whole codon, that codon's 1-based position) for a design
    continuing an ATG-started prompt, whose mask fixes an ATG, or starting with ATG itself."""
    fixed = mask_start(mask)
    if prompt.startswith("ATG"):
        owner, offset = "prompt", -len(prompt) % 3  # design bases before its first whole codon
    elif fixed is not None:
        owner, offset = "mask", fixed
    elif seq.startswith("ATG"):
        owner, offset = "design", 0
    else:
        return None, [], "", None
    usable = (len(seq) - offset) // 3 * 3
    protein = str(Seq(seq[offset : offset + usable]).translate(table=table))
    last = len(protein) - 1
    written = (mask or "").upper()

    def intended(at: int) -> bool:  # a stop the mask itself fixes is the design's end, not a failure
        return written[at : at + 3] in ("TAA", "TAG", "TGA")

    stops = [offset + 3 * i + 1 for i, aa in enumerate(protein)
             if aa == "*" and i < last and not intended(offset + 3 * i)]
    if owner == "prompt" and offset:  # the codon the prompt's last bases open runs into the design
        codon = prompt[len(prompt) - (3 - offset) :] + seq[:offset]
        if len(codon) == 3 and str(Seq(codon).translate(table=table)) == "*":
            stops.insert(0, 1)
    return owner, stops, protein, offset + 1


def report(seq: str, expected_length: int, mask: str | None = None, prompt: str = "") -> SequenceReport:
    gc = (seq.count("G") + seq.count("C")) / len(seq) if seq else 0.0
    start, end, strand, protein = longest_orf(seq)
    owner, stops, frame_protein, frame_start = coding_frame(seq, prompt, mask=mask)
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
        frame_start=frame_start,
        in_frame_stops=stops if owner else None,
        frame_protein=frame_protein,
        low_complexity=low_complexity(seq),
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
