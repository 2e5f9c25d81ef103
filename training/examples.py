"""Build the app's worked examples from public packages (run once; the output ships in assets/examples).

    python -m training.examples

Writes `assets/examples/hbb.fa`: 3,000 bases of the human beta-globin locus
around HBB from the HUMHBB GenBank entry of Debian's emboss-test package (an
entry held out of the demo models' training), with the sickle-cell variant
(HBB c.20A>T, Glu6Val) and HbC (c.19G>A, Glu6Lys) located in its coordinates
by the entry's own CDS annotation.
"""

from __future__ import annotations

import json
from pathlib import Path

from Bio import SeqIO

from .sources import fetch

EXCERPT = (61_000, 64_000)  # 0-based, half-open, in HUMHBB


def build(raw_dir: Path = Path("data/raw"), out_dir: Path = Path("assets/examples")) -> dict:
    root = fetch(raw_dir)
    entry = next(r for r in SeqIO.parse(str(root / "usr/share/EMBOSS/test/genbank/gbpri1.seq"), "genbank")
                 if r.name == "HUMHBB")
    cds = next(f for f in entry.features if f.type == "CDS" and f.qualifiers.get("gene") == ["HBB"])
    coding = [int(p) for p in cds.location]  # genomic index of each coding base
    lo, hi = EXCERPT
    excerpt = str(entry.seq[lo:hi]).upper()
    variants = []
    for name, c_pos, ref, alt, effect in [("sickle cell (HbS)", 20, "A", "T", "p.Glu6Val"),
                                          ("HbC", 19, "G", "A", "p.Glu6Lys")]:
        pos = coding[c_pos - 1] - lo + 1
        if excerpt[pos - 1] != ref:
            raise RuntimeError(f"HUMHBB does not hold {ref} at HBB c.{c_pos}")
        variants.append({"name": name, "hgvs": f"HBB c.{c_pos}{ref}>{alt} ({effect})",
                         "variant": f"{pos}:{ref}>{alt}"})
    cds_start = coding[0] - lo + 1
    out_dir.mkdir(parents=True, exist_ok=True)
    header = (f">HUMHBB_{lo + 1}-{hi} Human beta-globin locus, HUMHBB {lo + 1}..{hi} (GenBank via Debian "
              f"emboss-test); HBB coding start at {cds_start}")
    body = "\n".join(excerpt[i : i + 60] for i in range(0, len(excerpt), 60))
    (out_dir / "hbb.fa").write_text(f"{header}\n{body}\n")
    info = {"file": "hbb.fa", "source": "HUMHBB, Debian emboss-test 6.6.0+dfsg-12", "hbb_coding_start": cds_start,
            "variants": variants, "scan_region": [cds_start, cds_start + 89]}
    (out_dir / "hbb.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


if __name__ == "__main__":
    print(json.dumps(build(), indent=2))
