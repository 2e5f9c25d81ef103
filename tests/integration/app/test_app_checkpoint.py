"""The app serving a Carbon checkpoint directory in the released layout (155,776 ids, the Qwen3 text
tokenizer), as a self-hosting team runs it, driven with gradio_client and compared with the engine
on the same files: a tiny shape on the CPU, and the Carbon-3B shape (random weights, bf16) on a GPU.

Tolerances: on the CPU the app and the engine run the same fp32 arithmetic, so deltas agree to 1e-4.
In bf16 on a GPU a scan scores its windows in larger batches than a single variant does, and batch
size changes the kernels' summation order; a window's delta sums ~1,200 per-base terms, each exact
to bf16's 8-bit mantissa, so deltas are compared to 0.05 nats there. Designs are compared exactly:
the app and the engine make the same calls on the same device.
"""

from __future__ import annotations

import re

import pytest
import torch

from benchmarks.soak import start_app
from carbon_app.inference.generate import generate
from carbon_app.inference.scan import scan_substitutions
from carbon_app.inference.score import score_variant
from carbon_app.model.checkpoint import transformers_model
from carbon_app.model.manager import ModelManager
from tests.conftest import random_dna
from tests.synthetic import write_model_dir

pytest.importorskip("gradio_client")  # a GPU host may lack the app's libraries; the engine's GPU tests do not


SEQUENCE = random_dna(3000, seed=11)
MASK = "ATG" + "N" * 52 + "RYS" + "TAA"  # 61 positions: fixed bases and IUPAC codes
POSITION = 1500


def _iupac_pattern(mask: str) -> re.Pattern:
    codes = {"N": "[ACGT]", "R": "[AG]", "Y": "[CT]", "S": "[CG]"}
    return re.compile("".join(codes.get(c, c) for c in mask) + "$")


def _served_like_the_engine(tmp_path, tokenizer_dir, shape: str, device: str, dtype: torch.dtype, tolerance: float):
    from gradio_client import Client

    model_dir = write_model_dir(tmp_path / f"carbon-{shape}", shape, layout="carbon", text_tokenizer_dir=tokenizer_dir,
                                seed=3, dtype=dtype, device=device)
    log = tmp_path / "app.log"
    process, url = start_app(log, CARBON_MODEL=str(model_dir), CARBON_OUTPUT_DIR=str(tmp_path / "out"),
                             HF_HUB_OFFLINE="1")
    try:
        client = Client(url, verbose=False)
        _, _, status = client.predict(api_name="/models")
        name, loaded = status["configured"][0], status["loaded"][0]
        assert name == model_dir.name and str(tmp_path) not in repr(status)  # by its name, never the server's path
        assert loaded["device"].startswith(device) and loaded["dtype"] == str(dtype).replace("torch.", "")
        engine = ModelManager(device=device).get(str(model_dir))
        assert loaded["parameters"] == engine.decoder.n_parameters == sum(
            p.numel() for p in transformers_model(model_dir, torch.device("cpu"), torch.float32).parameters())

        for seed, temperature, samples in ((0, 0.0, 1), (5, 0.9, 2)):
            design = client.predict(model=name, species="none", region="none", prompt="ATGGCC", upload=None,
                                    n_bases=len(MASK), mask=MASK, mode="bp", temperature=temperature, seed=seed,
                                    samples=samples, api_name="/generate")[-1]
            expected = generate(engine, "ATGGCC", len(MASK), mask=MASK, temperature=temperature, seed=seed,
                                samples=samples)
            assert design["sequences"] == expected.sequences
            assert all(_iupac_pattern(MASK).match(s) for s in design["sequences"])

        ref = SEQUENCE[POSITION - 1]
        alt = "A" if ref != "A" else "C"
        variant = f"{POSITION}:{ref}>{alt}"
        scored = client.predict(name, "none", "none", SEQUENCE, None, variant, "", 1200, False, "marginal", "none", "",
                                0, api_name="/score_variant")[-1]
        assert scored["delta"] == pytest.approx(score_variant(engine, SEQUENCE, variant, window=1200).delta,
                                                abs=tolerance)

        scan = client.predict(name, "none", "none", SEQUENCE, None, POSITION - 5, POSITION + 4, 1200, "marginal", "",
                              api_name="/scan")[-1]
        expected_rows = scan_substitutions(engine, SEQUENCE, POSITION - 5, POSITION + 4, window=1200).rows()
        assert len(scan["rows"]) == 30
        assert [row[3] for row in scan["rows"]] == pytest.approx([row[3] for row in expected_rows], abs=tolerance)
        same_substitution = next(row for row in scan["rows"] if row[0] == POSITION and row[2] == alt)
        assert same_substitution[3] == pytest.approx(scored["delta"], abs=tolerance)  # one window rule
    except Exception as error:  # the app's own traceback, which the client's error does not carry
        tail = log.read_text()[-6000:]
        raise AssertionError(f"{error}\n--- the app's log, last 6,000 characters ---\n{tail}") from error
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_the_app_serves_a_checkpoint_in_the_released_layout_like_the_engine(tmp_path, carbon_tokenizer_dir):
    _served_like_the_engine(tmp_path, carbon_tokenizer_dir, "tiny", "cpu", torch.float32, tolerance=1e-4)


@pytest.mark.gpu
def test_the_app_on_a_gpu_serves_a_carbon_3b_shaped_checkpoint_like_the_engine(tmp_path, carbon_tokenizer_dir):
    _served_like_the_engine(tmp_path, carbon_tokenizer_dir, "3B", "cuda", torch.bfloat16, tolerance=0.05)


def test_the_app_serves_a_checkpoint_with_carbon_3bs_heads_like_the_engine(tmp_path, carbon_tokenizer_dir):
    """The GPU test's checkpoint (3B's 96-wide heads, 8 query heads to a key head, 32k context) at a CPU's width
    and dtype (float32: a CPU loads every checkpoint so): what fails here is not the GPU's."""
    _served_like_the_engine(tmp_path, carbon_tokenizer_dir, "3B-narrow", "cpu", torch.float32, tolerance=1e-4)
