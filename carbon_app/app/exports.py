"""A finished design as the files a person takes away, the same from the page and the command line.

FASTA carries one short header a design (its name, model, seed, length, weights and the app's version:
enough to tell designs apart and find their settings); everything that made it (tags, sampling, mask,
constraints, speculative decoding) is in `design_settings`, which the JSON and the GenBank file carry.
GenBank holds each design as a Biopython SeqRecord with features: the prompt and the designed bases, the
runs of bases a mask fixed or restricted, the protein a constraint made it encode (a CDS with its
translation), and each constraint with its check as a qualifier.
"""

from __future__ import annotations

import datetime
import io
import re

LINE = 60  # bases a line, in FASTA files and on the page


def design_name(index: int, with_prompt: bool = False) -> str:
    """design_1, design_2, ... (1-based), as every header and record names them."""
    return f"design_{index}" + ("_with_prompt" if with_prompt else "")


def fasta_header(result, index: int, with_prompt: bool = False) -> str:
    sequence = result.sequences[index - 1]
    bases = len(result.prompt) + len(sequence) if with_prompt else len(sequence)
    made_by = result.provenance
    return (f"{design_name(index, with_prompt)} model={result.model} seed={result.seed} bases={bases}"
            + (f" weights={made_by.short_weights} carbon_studio={made_by.version}" if made_by else ""))


def designs_fasta(result, with_prompt: bool = False) -> str:
    """Every design as FASTA (with its prompt before it when `with_prompt`), 60 bases a line."""
    out = []
    for index, sequence in enumerate(result.sequences, start=1):
        whole = result.prompt + sequence if with_prompt else sequence
        lines = "\n".join(whole[i : i + LINE] for i in range(0, len(whole), LINE))
        out.append(f">{fasta_header(result, index, with_prompt)}\n{lines}\n")
    return "".join(out)


def design_settings(result) -> dict:
    """Everything a design was made with, as plain values: enough to make it again."""
    speculative = result.speculative
    made_by = result.provenance.to_dict() if result.provenance else {}
    return {"app": made_by.get("app"), "model": result.model, "weights": made_by.get("weights"),
            "tags": result.tags or "none", "mode": result.mode,
            "temperature": result.temperature, "top_k": result.top_k, "top_p": result.top_p, "seed": result.seed,
            "bases": result.n_bases, "prompt_bases": len(result.prompt), "mask": result.mask or "none",
            "speculative_decoding": f"on, drafted by {speculative.draft_model}" if speculative else "off",
            "constraints": result.constraints.options() if result.constraints else {}}


def _mask_runs(mask: str) -> list[tuple[int, int, str]]:
    """(start, end, codes) of each run of mask codes that is not N: the bases a mask fixed or restricted."""
    return [(m.start(), m.end(), m.group()) for m in re.finditer(r"[^N]+", mask.upper())]


def design_records(result, reports: list[dict] | None = None) -> list:
    """Each design, its prompt before it, as a SeqRecord with features and qualifiers (`reports`: each
    design's checks, `design_reports`, for the log-likelihood, rank and constraint checks)."""
    from Bio.Seq import Seq
    from Bio.SeqFeature import FeatureLocation, SeqFeature
    from Bio.SeqRecord import SeqRecord

    settings = design_settings(result)
    if result.provenance:  # no GenBank line holds a 71-letter word: the checksum's first digits (the JSON: whole)
        settings["weights"] = result.provenance.short_weights
    shown = "; ".join(f"{key}={value}" for key, value in settings.items() if key not in ("constraints", "mask"))
    start = len(result.prompt)
    made_on = datetime.date.today().strftime("%d-%b-%Y").upper()  # GenBank's LOCUS date (Biopython: 01-JAN-1980)
    records = []
    for index, sequence in enumerate(result.sequences, start=1):
        report = reports[index - 1] if reports else {}
        record = SeqRecord(Seq(result.prompt + sequence), id=design_name(index), name=design_name(index),
                           description=f"Carbon Studio design {index} of {len(result.sequences)}, "
                                       f"{result.model}, seed {result.seed}")
        record.annotations.update(molecule_type="DNA", topology="linear", data_file_division="SYN",
                                  date=made_on, comment=f"made with {shown}")
        source = {"organism": "synthetic construct", "mol_type": "other DNA"}
        if report.get("total") is not None:
            source["note"] = [f"log-likelihood under {result.model}: {report['total']:.2f} nats "
                              f"(rank {report.get('rank', '-')} of {len(result.sequences)})"]
        record.features.append(SeqFeature(FeatureLocation(0, len(record.seq)), type="source", qualifiers=source))
        if start:
            record.features.append(SeqFeature(FeatureLocation(0, start), type="misc_feature",
                                              qualifiers={"note": ["the prompt, given"]}))
        designed = {"note": ["designed bases"]}
        for check in report.get("constraints", []):
            designed.setdefault("note", []).append(
                f"constraint {check['specification']}: {'PASS' if check['passes'] else 'FAIL'}")
        record.features.append(SeqFeature(FeatureLocation(start, start + len(sequence)), type="misc_feature",
                                          qualifiers=designed))
        for lo, hi, codes in _mask_runs(result.mask or ""):
            what = "fixed by the mask" if set(codes) <= set("ACGT") else f"restricted by the mask to {codes}"
            record.features.append(SeqFeature(FeatureLocation(start + lo, start + hi), type="misc_feature",
                                              qualifiers={"note": [what]}))
        protein = result.constraints.values()["protein"] if result.constraints else ""
        frame = _open_frame(str(record.seq), start, report)
        if frame and not protein:  # the frame the checks read (a prompt's, a mask's or its own ATG), open
            begin, end, translation, whose = frame
            record.features.append(SeqFeature(
                FeatureLocation(begin, end), type="CDS",
                qualifiers={"codon_start": ["1"], "transl_table": ["1"], "translation": [translation],
                            "note": [f"the open reading frame from {whose}, as the design's checks read it"]}))
        if protein:
            table = result.constraints.values()["codon_table"]
            coding = Seq(sequence[: 3 * len(protein)])
            record.features.append(SeqFeature(
                FeatureLocation(start, start + len(coding)), type="CDS",
                qualifiers={"codon_start": ["1"], "transl_table": [str(table)],
                            "translation": [str(coding.translate(table=table)).rstrip("*")],
                            "note": ["encodes the protein the design was constrained to"]}))
        records.append(record)
    return records


def _open_frame(whole: str, start: int, report: dict) -> tuple[int, int, str, str] | None:
    """(begin, end, protein, whose ATG) of the reading frame a design's checks read, in the record's
    coordinates (prompt then design) through its first stop codon; None where the checks read none or found
    a premature stop in it."""
    from Bio.Seq import Seq

    from ..inference.checks import frame_owner

    owner = report.get("coding_frame")
    if not owner or report.get("in_frame_stops"):
        return None
    begin = 0 if owner == "prompt" else start + (report.get("frame_start") or 1) - 1
    codons = (len(whole) - begin) // 3 * 3
    protein = str(Seq(whole[begin : begin + codons]).translate(table=1))
    stop = protein.find("*")
    length = len(protein) if stop < 0 else stop
    return (begin, begin + 3 * length + (3 if stop >= 0 else 0), protein[:length],
            frame_owner(owner, report.get("frame_start")))


def designs_genbank(result, reports: list[dict] | None = None) -> str:
    """`design_records` as GenBank text."""
    from Bio import SeqIO

    out = io.StringIO()
    SeqIO.write(design_records(result, reports), out, "genbank")
    return out.getvalue()
