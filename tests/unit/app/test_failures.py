"""Running out of memory, small memory budgets and cancelled requests: each gets a clear
message or releases what it held, and the loaded models keep working."""

from __future__ import annotations

import pytest
import torch

from carbon_app.app.service import AppConfig, Service
from carbon_app.errors import ModelError
from carbon_app.model.manager import ModelManager, out_of_memory_as_error

HBB_LIKE = "ATGGTGCACCTGACTCCTGAGGAGAAGTCTGCCGTTACTGCCCTGTGGGGCAAGGTGAACGTGGATGAAGTTGGTGGTGAGGCCCTGGGCAGG"


def _service(tmp_path, budget: int | None = None) -> Service:
    manager = ModelManager(device="cpu", memory_budget_bytes=budget)
    return Service(manager, AppConfig(models=["carbon-demo"], output_dir=tmp_path))


def _design(service: Service, **options):
    *_, (final, _) = service.design_stream("carbon-demo", "ATGGTGCAC", options.pop("n_bases", 60), False,
                                           seed=options.pop("seed", 3), **options)
    return final


def test_a_small_memory_budget_refuses_a_large_request_before_any_work_and_serves_small_ones(tmp_path):
    weights = ModelManager(device="cpu").get("carbon-demo").n_bytes
    tight = _service(tmp_path, budget=weights + 8 * 2**20)  # 8 MiB left for requests
    roomy = _service(tmp_path)
    with pytest.raises(ModelError, match=r"64 samples of .* needs about .* MiB of working memory .* fewer samples"):
        _design(tight, samples=64, n_bases=1400)
    with pytest.raises(ModelError, match="scan of 300 positions .* working memory"):
        tight.scan("carbon-demo", HBB_LIKE * 16, 400, 699, window=1500)
    assert tight.running == 0
    assert _design(tight, samples=2).sequences == _design(roomy, samples=2).sequences
    assert tight.manager.loads == 1  # the model was never dropped


def test_a_design_that_fits_a_tight_budget_gets_its_checks_too(tmp_path):
    """The checks' scoring pass asks for the memory its one row needs (it used to ask for a whole 2,048-token
    block, 64 MiB, and threw the designs away under a budget that had made them)."""
    weights = ModelManager(device="cpu").get("carbon-demo").n_bytes
    tight = _service(tmp_path, budget=weights + 4 * 2**20)  # 4 MiB left for requests
    designs = _design(tight, samples=4)
    reports = tight.design_reports(designs, flank="ACGT" * 50)
    assert len(reports) == 4 and all(r["ll_design"] < 0 and r["ll_flank"] < 0 for r in reports)
    assert tight.manager.loads == 1 and tight.running == 0


def _fail_with(error: BaseException, forward):
    """`forward` (a decoder's, which every forward pass runs) that raises `error` once, then runs."""
    state = {"armed": True}

    def failing(*args, **kwargs):
        if state["armed"]:
            state["armed"] = False
            raise error
        return forward(*args, **kwargs)

    return failing


@pytest.mark.parametrize("error, device_word", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "GPU"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to "
                  "allocate 68719476736 bytes"), "machine"),
])
@pytest.mark.parametrize("request_kind", ["design", "score", "scan"])
def test_running_out_of_memory_mid_request_is_a_message_and_the_model_keeps_working(tmp_path, error, device_word,
                                                                                      request_kind):
    service = _service(tmp_path)
    bundle = service.model("carbon-demo")
    run = {
        "design": lambda: _design(service).sequences,
        "score": lambda: service.score("carbon-demo", HBB_LIKE, "20:A>T", None, window=90).score.delta,
        "scan": lambda: [row[3] for row in service.scan("carbon-demo", HBB_LIKE, 10, 20, window=90)[0].rows()],
    }[request_kind]
    before = run()
    bundle.decoder.forward = _fail_with(error, bundle.decoder.forward)
    try:
        with pytest.raises(ModelError, match=f"the {device_word} ran out of memory during this .*still work"):
            run()
    finally:
        del bundle.decoder.forward  # the class's own again
    assert service.running == 0
    assert run() == before and service.manager.loads == 1


def test_other_runtime_errors_are_not_mistaken_for_memory():
    with pytest.raises(RuntimeError, match="shape mismatch"), out_of_memory_as_error("this test"):
        raise RuntimeError("shape mismatch")


def test_a_closed_stream_releases_its_request(tmp_path):
    """What Gradio does when a user cancels or disconnects: it closes the handler's generator."""
    service = _service(tmp_path)
    stream = service.design_stream("carbon-demo", "ATGGTGCAC", 1200, True, seed=1, stream_every=2)
    partial, _ = next(stream)
    assert not partial.done and service.running == 1
    stream.close()
    assert service.running == 0 and service.stopped == 1
    assert _design(service).done  # the next request runs normally
