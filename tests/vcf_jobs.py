"""VCF jobs for the tests that stop and resume them: a random VCF on the demo genome, a job sent to a
launched app, and what its outputs hold."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pysam

from tests.conftest import REPO

HBB_FA = REPO / "assets" / "examples" / "hbb.fa"


def random_vcf(path: Path, records: int, seed: int = 1) -> Path:
    """`records` single-base substitutions at distinct random positions of the HBB demo genome, sorted,
    with a line that is not a record in the middle (it must be listed once, in order, however the job ran)."""
    name, sequence = demo_genome()
    rng = random.Random(seed)
    lines = ["##fileformat=VCFv4.2", "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    for i, pos in enumerate(sorted(rng.sample(range(200, len(sequence) - 200), records))):
        ref = sequence[pos - 1]
        lines.append(f"{name}\t{pos}\tv{i}\t{ref}\t{rng.choice([b for b in 'ACGT' if b != ref])}\t.\t.\t.")
        if i == records // 2:
            lines.append("not\ta\trecord")
    path.write_text("\n".join(lines) + "\n")
    return path


def vcf_job_running(client, source: Path):
    """`source` sent to a launched app's VCF tab (the demo genome, fast settings), once the job runs."""
    from gradio_client import handle_file

    job = client.submit("carbon-demo", "none", "none", "HBB-locus-demo", handle_file(str(source)), 300, False,
                        "marginal", 0, api_name="/score_vcf")
    deadline = time.time() + 60
    while time.time() < deadline and not client.predict(api_name="/models")[2]["requests_running"]:
        time.sleep(0.1)
    assert time.time() < deadline, "the VCF job did not start"
    return job


def demo_genome() -> tuple[str, str]:
    lines = HBB_FA.read_text().splitlines()
    return lines[0][1:].split()[0], "".join(lines[1:])


def records_of(path: Path) -> list[tuple]:
    with pysam.VariantFile(str(path)) as vcf:
        return [(r.chrom, r.pos, r.id, r.ref, r.alts, r.info.get("CARBON_DELTA")) for r in vcf]


def partial_line(path: Path) -> str | None:
    with pysam.VariantFile(str(path)) as vcf:
        return next((str(line).strip() for line in vcf.header.records if line.key == "carbon_partial"), None)

