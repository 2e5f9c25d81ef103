"""Tags are part of the scoring setup, and every result names what made it: the app, the model, its weights and
the setup, with its differences from the model's own."""

from __future__ import annotations

import hashlib
import json
import shutil

import pysam
import pytest

import carbon_app
from carbon_app.genome.reference import Reference
from carbon_app.genome.vcf import score_vcf
from carbon_app.inference.provenance import Provenance
from carbon_app.inference.scan import scan_substitutions
from carbon_app.inference.score import score_variant
from carbon_app.inference.spec import measured_spec, resolve_spec
from carbon_app.model.bundle import load_bundle
from carbon_app.model.card import weights_identity
from tests.conftest import REPO

DEMO = REPO / "assets" / "models" / "carbon-demo"
HBB = json.loads((REPO / "assets" / "examples" / "hbb.json").read_text())
APP = f"Carbon Studio {carbon_app.__version__}"


def _hbb() -> str:
    from carbon_app.core.dna import read_fasta

    return read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence


@pytest.fixture(scope="module")
def tagged_card(tmp_path_factory):
    """carbon-demo with a card whose own setup names a species tag (as a model measured with tags would)."""
    folder = tmp_path_factory.mktemp("tagged") / "carbon-demo-mammal"
    shutil.copytree(DEMO, folder)
    setup = json.loads((DEMO / "scoring.json").read_text())
    (folder / "scoring.json").write_text(json.dumps({**setup, "species": "mammal"}))
    return load_bundle(str(folder))


def test_a_models_own_setup_names_its_tags_and_any_other_tag_is_a_named_difference(demo, tagged_card):
    own = measured_spec(demo)
    assert (own.species, own.region) == (None, None)  # Carbon's scores were measured untagged
    assert Provenance.of(demo, own).differences == ()
    tagged = resolve_spec(demo, species="mammal", region="protein_coding")
    assert tagged.prefix == demo.tags.prefix("mammal", "protein_coding")
    assert list(Provenance.of(demo, tagged).differences) == ["species tag mammal (model's own: none)",
                                                              "region tag protein_coding (model's own: none)"]
    # a card that names a tag: left out, it is used; "none" is a choice, and a difference
    assert measured_spec(tagged_card).species == "mammal"
    untagged = resolve_spec(tagged_card, species="none")
    assert untagged.species is None and untagged.prefix == ""
    assert list(Provenance.of(tagged_card, untagged).differences) == ["species tag none (model's own: mammal)"]
    sequence, change = _hbb(), HBB["variants"][0]["variant"]
    assert score_variant(tagged_card, sequence, change).delta == pytest.approx(
        score_variant(demo, sequence, change, species="mammal").delta, abs=1e-6)
    assert score_variant(tagged_card, sequence, change, species="none").delta == pytest.approx(
        score_variant(demo, sequence, change).delta, abs=1e-6)


@pytest.mark.parametrize("tag", [7, ["mammal"], {"a": 1}])
def test_a_tag_that_is_not_text_is_refused_by_name(demo, tag):
    from carbon_app.errors import InputError

    with pytest.raises(InputError, match="species tag must be a name"):
        resolve_spec(demo, species=tag)


def test_weights_are_named_by_their_hub_commit_or_their_checksum(tmp_path):
    commit = "46c2c30aac53dd0c566071893052f45594f81037"
    snapshot = tmp_path / "models--HuggingFaceBio--Carbon-3B" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    assert weights_identity(snapshot) == f"hub-commit:{commit}"
    local = tmp_path / "local"
    shutil.copytree(DEMO, local)
    before = weights_identity(local)
    assert before == f"sha256:{hashlib.sha256((DEMO / 'model.safetensors').read_bytes()).hexdigest()}"
    weights = bytearray((local / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of one weight
    (local / "model.safetensors").write_bytes(bytes(weights))
    assert weights_identity(local) != before
    assert weights_identity(tmp_path) == "no weight files"


def test_a_variants_files_and_json_name_the_app_the_weights_and_the_setup(service, demo):
    sequence, change = _hbb(), HBB["variants"][0]["variant"]
    report = service.score("carbon-demo", sequence, change, None, species="mammal", window=600)
    tracks, whole = service.variant_files(report.score, report.to_dict())
    lead = [line for line in open(tracks).read().splitlines() if line.startswith("## ")]
    assert lead[0] == f"## made by {APP}" and lead[1] == f"## model=carbon-demo weights={demo.weights}"
    assert lead[2] == f"## scoring {report.score.spec.header()}" and "species=mammal" in lead[2]
    assert lead[3] == ("## differs from the model's own scoring setup: window 600 (model's own: 1,200); "
                       "species tag mammal (model's own: none)")
    made_by = json.loads(open(whole).read())["provenance"]
    assert made_by == {"app": APP, "model": "carbon-demo", "weights": demo.weights,
                       "scoring": report.score.spec.settings(),
                       "differs_from_model_setup": ["window 600 (model's own: 1,200)",
                                                    "species tag mammal (model's own: none)"]}


def test_a_scans_table_names_what_made_it(demo):
    scan = scan_substitutions(demo, _hbb(), 1206, 1208, region="protein_coding")
    lead = [line for line in scan.to_tsv().splitlines() if line.startswith("## ")]
    assert lead == [f"## made by {APP}", f"## model=carbon-demo weights={demo.weights}",
                    f"## scoring {scan.spec.header()}",
                    "## differs from the model's own scoring setup: region tag protein_coding (model's own: none)"]


def test_a_scored_vcf_and_its_table_name_the_app_the_weights_and_the_setup(demo, tmp_path):
    reference = Reference(REPO / "assets" / "examples" / HBB["file"])
    out, tsv = tmp_path / "out.vcf.gz", tmp_path / "out.tsv"
    summary = score_vcf(demo, reference, REPO / "assets" / "examples" / HBB["vcf"], out, tsv, species="mammal")
    assert summary.provenance.differences == ("species tag mammal (model's own: none)",)
    with pysam.VariantFile(str(out)) as vcf:
        meta = {record.key: record.value for record in vcf.header.records if record.value}
    assert meta["carbon_studio_version"] == APP
    assert meta["carbon_studio_setup"] == "differs from the model's own scoring setup: species tag mammal (model's " \
                                          "own: none)"
    settings = next(str(r) for r in pysam.VariantFile(str(out)).header.records if r.key == "carbon_studio")
    assert f"model=carbon-demo,weights={demo.weights},genome=" in settings and "species=mammal" in settings
    lead = [line for line in tsv.read_text().splitlines() if line.startswith("## ")]
    assert lead == summary.provenance.comment_lines()
