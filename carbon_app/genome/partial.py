"""A VCF job stopped part-way: the partial output it leaves, and what resuming from it carries over.

A stopped job (a shutdown, a cancel, an error while scoring) still writes a valid VCF: closed, indexed
where sorted, holding every record of each chunk it finished, in order, and one header line that says so:

    ##carbon_partial=stopped after record 1024 of 5000 (input line 1031): shutdown (SIGTERM); ...

`score-vcf --resume` (`score_vcf(..., resume=True)`) reads that line back, checks that the output was made
with the same settings from the same records, keeps what it holds and scores the rest: each record is
written once, and the whole file is what one uninterrupted run writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

KEY = "carbon_partial"
_LINE = re.compile(rf"^##{KEY}=stopped after record (\d+) of (\d+) \(input line (\d+)\): (.*?); ")
_SETTINGS = "##carbon_studio=<"


@dataclass(frozen=True)
class Partial:
    """Where a VCF job stopped: the records of the input written (pysam's order, the ones it could not read
    counted), of how many, the input line of the last one (0: none yet) and why it stopped."""

    records_done: int
    records_total: int
    last_line: int
    why: str

    def header_line(self) -> str:
        # read back by _LINE: the reason is the text up to the first "; "
        return (f"##{KEY}=stopped after record {self.records_done} of {self.records_total} (input line "
                f"{self.last_line}): {self.why}; the records after it are not in this file; score-vcf --resume "
                "finishes it")

    def sentence(self) -> str:
        return (f"stopped after {self.records_done:,} of {self.records_total:,} records ({self.why}): the VCF "
                f"holds those and says it is partial (header line ##{KEY}); score-vcf --resume finishes it")


def header_lines(path: Path) -> list[str]:
    """The meta lines (##) of a VCF, as pysam reads its header."""
    import pysam

    try:
        with pysam.VariantFile(str(path)) as vcf:
            return [str(line).rstrip("\n") for line in vcf.header.records]
    except (OSError, ValueError) as exc:
        raise InputError(f"the output '{path.name}' cannot be read to resume it: {exc}") from None


def earlier_output(path: Path, settings: str, line_of: list[int]) -> Partial:
    """What the output a job resumes holds, refused unless it was written with `settings` (the header's
    ##carbon_studio line) for an input whose records are on lines `line_of`. A complete output holds them
    all."""
    records_total = len(line_of)
    lines = header_lines(path)
    made_with = next((line[len(_SETTINGS):-1] for line in lines if line.startswith(_SETTINGS)), None)
    if made_with is None:
        raise InputError(f"the output '{path.name}' was not written by score-vcf (no ##carbon_studio line): "
                         "nothing to resume; leave out --resume to score the VCF again")
    if made_with != settings:
        raise InputError(f"the output '{path.name}' was scored with {made_with}, not {settings}: resume it with "
                         "the same model, genome and scoring options, or leave out --resume to score it again")
    stop = next((found for line in lines if (found := _LINE.match(line))), None)
    if stop is None:
        return Partial(records_total, records_total, line_of[-1] if line_of else 0, "complete")
    done, total, last, why = int(stop[1]), int(stop[2]), int(stop[3]), stop[4]
    if total != records_total:
        raise InputError(f"the output '{path.name}' was stopped in a VCF of {total:,} records; this one has "
                         f"{records_total:,}: resume it with the VCF it was made from")
    return Partial(done, total, last, why)


def kept_rows(tsv: Path, last_line: int):
    """The rows of an earlier run's TSV up to input line `last_line` (its header first): what it wrote for the
    records it finished and the lines before them."""
    if not tsv.is_file():
        raise InputError(f"the table '{tsv.name}' of the run being resumed is missing: resume without --tsv, or "
                         "leave out --resume to score the VCF again")
    with open(tsv) as rows:
        yield next(rows, "")
        for row in rows:
            line = row.split("\t", 1)[0]
            if line.isdigit() and int(line) <= last_line:
                yield row
