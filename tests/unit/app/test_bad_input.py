"""A fixed list of nasty inputs, through the same service the web handlers call: each is
read correctly or refused with a message that names the problem, and the service keeps serving."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import pytest
from Bio import SeqIO
from Bio.Seq import Seq
from Bio.SeqRecord import SeqRecord

import carbon_app
from carbon_app.app.service import AppConfig, Service
from carbon_app.core.validate import real_number, whole_number
from carbon_app.errors import CarbonError, InputError
from carbon_app.model.manager import ModelManager
from tests.conftest import REPO

BASES = "ATGGTGCACCTGACTCCTGAGGAGAAGTCTGCCGTTACTGCCCTGTGGGGCAAGGTGAACGTGGATGAAGTTGGTGGTGAGGCCCTGGGCAGG"


def _genbank(records: list[tuple[str, str]]) -> str:
    handle = io.StringIO()
    SeqIO.write([SeqRecord(Seq(seq), id=name, name=name, annotations={"molecule_type": "DNA"})
                 for name, seq in records], handle, "genbank")
    return handle.getvalue()


def _numbered(seq: str) -> str:
    """Lines as GenBank's ORIGIN block shows them: position, then blocks of 10 lower-case bases."""
    lines = []
    for start in range(0, len(seq), 60):
        chunk = seq[start : start + 60].lower()
        lines.append(f"{start + 1:>9} " + " ".join(chunk[i : i + 10] for i in range(0, len(chunk), 10)))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, expected", [
    (">hbb\r\n" + BASES[:60] + "\r\n" + BASES[60:] + "\r\n", BASES),  # Windows line endings
    (BASES.lower(), BASES),
    ("  " + BASES[:30] + "\n" + BASES[30:] + "  \n", BASES),
    (_numbered(BASES), BASES),  # copied from a GenBank page
    (_genbank([("HBB1", BASES)]), BASES),  # a whole GenBank record
    (BASES[:40] + "\u00a0" + BASES[40:], BASES),  # a non-breaking space from a web page
    ("A" * 1_000_000, "A" * 1_000_000),  # a megabyte paste under the limit
])
def test_sequences_pasted_in_common_shapes_are_read(service, text, expected):
    assert service.sequence(text, None, "reference sequence") == expected


@pytest.mark.parametrize("text, message", [
    (">a\nACGT\n>b\nGGCC\n", r"holds 2 records \(a, b\); paste or upload only the record you want"),
    (_genbank([("ONE", "ACGT"), ("TWO", "GGCC")]), r"holds 2 records \(ONE, TWO\); paste or upload only"),
    ("ACGUACGU", "U at position 4: it looks like RNA"),
    ("ACGT5ACGT", "'5' at position 5, which is not a DNA base .*numbered GenBank-style lines"),
    ("        1 acgtacgtac\nACGT 12", "'1' at position 1"),  # numbers on some lines only: not guessed
    ("", "reference sequence is empty"),
    ("   \n\t ", "reference sequence is empty"),
    (">only a header\n", "record 'only' is empty"),
    ("ACGT✓", "'✓' at position 5"),
    ("AC\u200bGT", "the invisible character U[+]200B at position 3"),
    ("A" * 2_000_001, "2,000,001 characters; the limit is 2,000,000"),
    (";comment\nACGT", "looks like FASTA"),
])
def test_bad_sequences_are_refused_by_name(service, text, message):
    with pytest.raises(InputError, match=message):
        service.sequence(text, None, "reference sequence")


def _design(service, prompt="ATGGTGCAC", n_bases=30, **options):
    *_, (final, _) = service.design_stream("carbon-demo", prompt, n_bases, False, **options)
    return final


@pytest.mark.parametrize("prompt, n_bases, options, message", [
    # the engine's checks are tested where it makes them (test_generate); here, that a refusal
    # through the service the web handlers call leaves nothing running, for each stage that refuses
    ("ACGTACGU", 12, {}, "looks like RNA"),  # the prompt
    ("ACGTAC", 2000, {}, "2,000 bases do not fit: the model's context is 256 tokens"),  # the plan
    ("ACGTAC", 12, {"samples": 65}, "number of samples must be between 1 and 64"),  # the run settings
    ("ACGTAC", 12, {"temperature": 11}, "temperature must be between 0 and 10"),  # the sampling settings
])
def test_a_refused_design_leaves_nothing_running(service, prompt, n_bases, options, message):
    with pytest.raises(InputError, match=message):
        _design(service, prompt, n_bases, **options)
    assert service.running == 0


def test_iupac_codes_in_whole_prompt_kmers_are_read_as_unknown_tokens(service):
    out = _design(service, "NNNNNNACGTAC", 13, seed=1)
    tokenizer = service.model("carbon-demo").tokenizer
    assert out.prompt_text == "<dna>NNNNNNACGTAC"
    assert out.prompt_ids[-3:] == [tokenizer.open_id, tokenizer.oov_id, *tokenizer.kmer_ids("ACGTAC")]
    assert len(out.sequences[0]) == 13


@pytest.mark.parametrize("variant, message", [
    ("", "give a variant as POS:REF>ALT"),
    ("12", "'12' is not of the form POS:REF>ALT"),
    ("A>G", "not of the form POS:REF>ALT"),
    ("12:A>", "not of the form POS:REF>ALT"),
    ("0:A>G", "positions start at 1, not 0"),
    ("-3:A>G", "not of the form"),
    ("12:A>A", "changes nothing"),
    ("12:X>G", "the reference allele is 'X'; alleles are A, C, G and T only"),
    ("12:A>G 13:C>T", "holds several variants; score one at a time"),
    ("c.12A>G", r"counted on a coding sequence \(HGVS c.\), and none is given"),
    ("12:T>G", "the reference has 'G' at position 12, not 'T' as variant 12:T>G says"),
    ("400:A>G", "beyond the 93-base sequence"),
    ("99999999999999999999:A>G", "beyond the 93-base sequence"),
])
def test_bad_variants_are_refused_by_name(service, variant, message):
    with pytest.raises(InputError, match=message):
        service.score("carbon-demo", BASES, variant, None, window=90)


def test_variant_and_alternate_together_or_neither_are_refused(service):
    with pytest.raises(InputError, match="not both"):
        service.score("carbon-demo", BASES, "12:A>G", BASES, window=90)
    with pytest.raises(InputError, match="give a variant as POS:REF>ALT"):
        service.score("carbon-demo", BASES, "  ", "", window=90)


def test_a_reference_longer_than_the_context_is_scored_in_a_window_that_the_result_names(service):
    scored = service.score("carbon-demo", "ACGT" * 1000, "2000:T>A", None, window=4000).score
    assert scored.frame_bases <= 1536  # what one pass of the model reads
    assert scored.window_end - scored.window_start + 1 == scored.frame_bases + 5  # the span of the six frames
    assert scored.window_start <= 2000 <= scored.window_end


@pytest.mark.parametrize("start, end, message", [
    (50, 40, "start <= end"),
    (0, 10, "the scan start must be at least 1, not 0"),
    (2.5, 10, "the scan start must be a whole number, not 2.5"),
    (10, 94, "must lie within the 93-base sequence"),
])
def test_bad_scan_regions_are_refused_by_name(service, start, end, message):
    with pytest.raises(InputError, match=message):
        service.scan("carbon-demo", BASES, start, end, window=90)


@pytest.mark.parametrize("value, message", [
    (None, "the number of bases is empty"),
    ("", "the number of bases is empty"),
    (2.5, "must be a whole number, not 2.5"),
    (float("nan"), "must be a whole number, not nan"),
    ("12x", "must be a whole number, not '12x'"),
    (True, "must be a whole number, not True"),
    (-4, "must be between 1 and 100,000, not -4"),
])
def test_every_number_a_face_sends_is_checked_by_name(value, message):
    with pytest.raises(InputError, match=message):
        whole_number(value, "the number of bases", 1, 100_000)
    assert whole_number(300.0, "the number of bases", 1) == 300 and whole_number("40", "top-k", 0) == 40



@pytest.mark.parametrize("value, bounds, message", [
    (None, {}, "the rate is empty"),
    ("fast", {}, "the rate must be a number, not 'fast'"),
    (True, {}, "the rate must be a number, not True"),
    (float("inf"), {}, "the rate must be a finite number, not inf"),
    ("nan", {"low": 0, "high": 1}, "the rate must be between 0 and 1, not nan"),
    (-0.5, {"low": 0}, "the rate must be at least 0, not -0.5"),
    (0, {"low": 0, "above_low": True}, "the rate must be above 0, not 0"),
    (1.5, {"low": 0, "high": 1, "above_low": True}, "the rate must be above 0 and at most 1, not 1.5"),
    (2, {"high": 1}, "the rate must be at most 1, not 2"),
])
def test_every_real_number_is_checked_by_name_and_range(value, bounds, message):
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        real_number(value, "the rate", **bounds)
    assert real_number("0.25", "the rate", 0, 1, above_low=True) == 0.25 and real_number(0, "the rate", 0, 1) == 0.0


def test_after_all_that_the_service_still_answers(service):
    assert service.running == 0
    assert len(_design(service, seed=4).sequences[0]) == 30
    with pytest.raises(CarbonError):
        service.model("/etc/passwd")


def test_design_downloads_record_how_to_make_each_design_again(service):
    """Short FASTA headers (name, model, seed, bases, the weights' checksum and the app's version); every setting
    in the JSON and the GenBank file, enough to make each design again, with the weights and the app; GenBank
    features for the prompt, the designed bases and the mask's runs."""
    final = _design(service, "ATGGTGCATCTG", 20, seed=11, species="plant", mask="N" * 17 + "TAA", top_k=50,
                    samples=2)
    designs, with_prompt, genbank, settings_file = service.design_files(final)
    records = list(SeqIO.parse(designs, "fasta"))
    assert [str(r.seq) for r in records] == final.sequences
    weights = final.provenance.weights
    shipped = (REPO / "assets" / "models" / "carbon-demo" / "model.safetensors").read_bytes()
    assert weights == f"sha256:{hashlib.sha256(shipped).hexdigest()}"  # the checksum of the weights it ran
    version = f"carbon_studio={carbon_app.__version__}"
    assert records[1].description == f"design_2 model=carbon-demo seed=11 bases=20 weights={weights[:23]} {version}"
    settings = json.loads(open(settings_file).read())["settings"]
    assert settings == {"app": f"Carbon Studio {carbon_app.__version__}", "model": "carbon-demo", "weights": weights,
                        "tags": "<plant_species>", "mode": "bp", "temperature": 0.9,
                        "top_k": 50, "top_p": 1.0, "seed": 11, "bases": 20, "prompt_bases": 12,
                        "mask": "N" * 17 + "TAA", "speculative_decoding": "off", "constraints": {}}
    again = _design(service, "ATGGTGCATCTG", settings["bases"], seed=settings["seed"], species="plant",
                    mask=settings["mask"], top_k=settings["top_k"], samples=2)
    assert again.sequences == final.sequences  # the settings are enough to make it again
    whole = list(SeqIO.parse(with_prompt, "fasta"))
    assert [str(r.seq) for r in whole] == ["ATGGTGCATCTG" + s for s in final.sequences]
    assert whole[0].description == f"design_1_with_prompt model=carbon-demo seed=11 bases=32 weights={weights[:23]} " \
        + version
    entries = list(SeqIO.parse(genbank, "genbank"))
    assert [str(r.seq) for r in entries] == ["ATGGTGCATCTG" + s for s in final.sequences]
    features = {(f.type, int(f.location.start), int(f.location.end), f.qualifiers.get("note", [""])[0])
                for f in entries[0].features}
    assert {("misc_feature", 0, 12, "the prompt, given"), ("misc_feature", 12, 32, "designed bases"),
            ("misc_feature", 29, 32, "fixed by the mask")} <= features
    comment = entries[0].annotations["comment"]
    assert entries[0].annotations["molecule_type"] == "DNA" and "seed=11" in comment
    assert f"weights={weights[:23]}" in comment and f"Carbon Studio {carbon_app.__version__}" in comment


@pytest.mark.parametrize("name", ["evil-owner/big-repo", "HuggingFaceBio/Carbon-8B@main", "/etc", "../../assets",
                                  "~/.cache/huggingface/hub", "carbon-demo/../carbon-demo"])
def test_a_model_name_the_server_does_not_serve_is_refused_before_any_lookup(service, name, monkeypatch):
    import carbon_app.app.service as service_module

    looked_up = []
    monkeypatch.setattr(service_module, "resolve_model_dir", lambda n: looked_up.append(n))
    for read in (service.tag_choices, service.variant_method, service.model_card, service.model, service.unload):
        with pytest.raises(InputError, match="is not one of this server's models"):
            read(name)
    assert looked_up == []


def test_a_tag_scheme_file_of_the_wrong_shape_is_named(tmp_path):
    from carbon_app.core.tags import load_tag_scheme
    from carbon_app.errors import ModelError

    (tmp_path / "tag_scheme.json").write_text('["mammal"]')
    with pytest.raises(ModelError, match="tag_scheme.json must hold a JSON object"):
        load_tag_scheme(tmp_path)
    (tmp_path / "tag_scheme.json").write_text('{"species": ["mammal"]}')
    with pytest.raises(ModelError, match='"species" must map each key to its tag text'):
        load_tag_scheme(tmp_path)


def test_a_vcf_without_a_header_is_named_without_the_servers_paths(tmp_path):
    from carbon_app.assets import ASSETS

    service = Service(ModelManager(device="cpu"), AppConfig(models=["carbon-demo"], output_dir=tmp_path / "out",
                                                            genomes={"demo": ASSETS / "examples" / "hbb.fa"}))
    (tmp_path / "out").mkdir()
    headless = tmp_path / "uploads" / "no_header.vcf"
    headless.parent.mkdir()
    headless.write_text("HUMHBB_61001-64000\t1206\t.\tA\tT\t.\t.\t.\n")
    with pytest.raises(InputError, match="no #CHROM header line") as refused:
        service.score_vcf("carbon-demo", "demo", str(headless))
    assert "no_header.vcf" in str(refused.value) and str(tmp_path) not in str(refused.value)


def test_the_smaller_holes_each_get_a_named_message(tmp_path, monkeypatch, compact):
    from carbon_app.app.tabs.design import mask_check
    from carbon_app.assets import ASSETS
    from carbon_app.core.coding import CodingSequence
    from carbon_app.genome.reference import Reference
    from carbon_app.genome.vcf import score_vcf
    from carbon_app.inference.score import score_variant

    assert "the number of bases must be a whole number, not 'abc'" in mask_check("NNN", "abc")
    monkeypatch.setenv("CARBON_MEMORY_BUDGET_GB", "abc")
    with pytest.raises(InputError, match="CARBON_MEMORY_BUDGET_GB"):
        ModelManager(device="cpu")
    monkeypatch.delenv("CARBON_MEMORY_BUDGET_GB")
    vcf = tmp_path / "in.vcf"
    vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n")
    reference = Reference(ASSETS / "examples" / "hbb.fa")
    for out in ("missing_dir/x.vcf.gz", "missing_dir/x.vcf"):
        with pytest.raises(InputError, match="does not exist: make it first"):
            score_vcf(None, reference, vcf, tmp_path / out)
    for folder in ("/sys", "/proc"):  # folders a root process is told it may write, and cannot
        with pytest.raises(InputError, match=f"the folder of the output '{folder}/x.vcf.gz' cannot be written"):
            score_vcf(None, reference, vcf, f"{folder}/x.vcf.gz")
        from carbon_app.genome.regions import scan_regions

        with pytest.raises(InputError, match=f"the folder of the output '{folder}/x.tsv' cannot be written"):
            scan_regions(None, reference, vcf, f"{folder}/x.tsv")
    with pytest.raises(InputError, match="overlap or are out of order"):
        CodingSequence.parse("1..3,2..4", "ACGTACGTAC")
    with pytest.raises(InputError, match="the 100,001-base alternate allele does not fit"):
        score_variant(compact, BASES, f"4:{BASES[3]}>{BASES[3]}" + "C" * 100_000)


def test_result_files_are_kept_for_the_retention_age_and_size_and_a_running_jobs_folder_is_never_taken(tmp_path):
    import os
    import time

    from carbon_app.app.results import Retention, expire

    root = tmp_path / "results"
    root.mkdir()
    now = time.time()

    def folder(name: str, age_s: float, n_bytes: int):
        path = root / name
        path.mkdir()
        (path / "result.tsv").write_bytes(b"x" * n_bytes)
        for p in (path / "result.tsv", path):
            os.utime(p, (now - age_s, now - age_s))
        return path

    stale = folder("stale", 25 * 3600, 10)  # past the age: removed whatever the size
    old = folder("old", 5 * 3600, 600)  # within the age, the oldest: removed while the total is over the limit
    middle = folder("middle", 2 * 3600, 300)
    running = folder("running", 30 * 3600, 500)  # a job still writing it: held, whatever its age
    retention = Retention(max_age_s=24 * 3600, max_bytes=1000)
    removed, total = expire(root, retention, now, held={running})
    assert sorted(p.name for p in removed) == ["old", "stale"] and total == 800
    assert not stale.exists() and not old.exists() and middle.exists() and running.exists()
    assert expire(root, retention, now, held={running}) == ([], 800)  # within both bounds: nothing more goes
    growing = folder("growing", 0, 2000)  # over the size: the folders not held go, newest or not
    assert expire(root, retention, now, held={running}) == ([middle, growing], 500) and running.exists()


def test_requests_at_any_rate_cannot_outrun_the_results_size_limit(tmp_path, demo_manager):
    """Refused genome uploads leave nothing behind; results beyond the limit push out the oldest at once, and
    when the running jobs' folders leave no room a new result is refused with a sentence."""
    import gzip

    from carbon_app.app.results import Retention
    from carbon_app.genome.vcf import UploadLimits

    limit = 3 * 2**20
    service = Service(demo_manager, AppConfig(models=["carbon-demo"], output_dir=tmp_path / "out",
                                              retention=Retention(max_bytes=limit),
                                              upload_limits=UploadLimits(expanded_bytes=2**20)))
    service.config.output_dir.mkdir()
    vcf = tmp_path / "in.vcf"
    vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
                   "HUMHBB_61001-64000\t1206\t.\tA\tT\t.\t.\t.\n")
    big = tmp_path / "big.fa.gz"  # small packed, 2 MB unpacked: refused past the 1 MB the server takes
    big.write_bytes(gzip.compress(b">chr1\n" + b"ACGT" * 2**19))
    for _ in range(40):
        with pytest.raises(InputError, match="expands to more than 1 MB"):
            service.score_vcf("carbon-demo", None, str(vcf), genome_upload=str(big), window=300)
    assert list(service.config.output_dir.iterdir()) == []  # nothing of the refused uploads is kept
    for _ in range(12):  # 12 results of about 0.5 MB each, into a 3 MB limit
        service._write("result.txt", "x" * 2**19)
        held = sum(p.stat().st_size for p in service.config.output_dir.rglob("*") if p.is_file())
        assert held <= limit
    with service.results.held(2 * 2**20):  # a running job holds 2 MB of room
        with pytest.raises(InputError, match="this server's space for results is full"):
            service.results.new_folder(2 * 2**20)


def test_the_service_clears_expired_results_before_it_writes_a_new_one(tmp_path, demo_manager, monkeypatch):
    import os

    from carbon_app.app.results import Retention

    service = Service(demo_manager, AppConfig(models=["carbon-demo"], output_dir=tmp_path,
                                              retention=Retention(max_age_s=60, max_bytes=2**20)))
    first = Path(service.scan_file(*_a_scan(service)))
    for path in (first, first.parent):  # written an hour ago
        os.utime(path, (first.stat().st_mtime - 3600,) * 2)
    second = Path(service.scan_file(*_a_scan(service)))
    assert second.exists() and not first.exists() and [p.name for p in tmp_path.iterdir()] == [second.parent.name]
    monkeypatch.setenv("CARBON_RESULTS_MAX_AGE_HOURS", "none")
    with pytest.raises(InputError, match="CARBON_RESULTS_MAX_AGE_HOURS must be a number"):
        Retention.from_env()
    monkeypatch.setenv("CARBON_RESULTS_MAX_AGE_HOURS", "12")
    monkeypatch.setenv("CARBON_RESULTS_MAX_MB", "100")
    assert Retention.from_env().sentence() == ("results are kept 12 hours, and at most 100 MB of them (the oldest "
                                               "go first)")


def _a_scan(service):
    return service.scan("carbon-demo", "ACGTACGTACGTACGTACGT", 5, 6, window=20)
