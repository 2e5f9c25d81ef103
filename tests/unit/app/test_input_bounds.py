"""Every input that sizes work or memory has an upper bound derived from what it means, checked before anything
is allocated for it, and refused with a sentence that names it (a public server's first defence)."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from carbon_app.app.service import MAX_PASTE_CHARS
from carbon_app.app.tabs.common import guarded
from carbon_app.core.dna import BASES, MAX_RECORD_FILE_BYTES, read_fasta
from carbon_app.errors import InputError
from carbon_app.inference.constraints import JUNCTION, DesignConstraints
from carbon_app.inference.constraints.kinds.homopolymer import RunRule
from carbon_app.inference.constraints.kinds.sites import MAX_LIST_CHARS, MAX_MOTIF_BASES, MAX_SITES, resolve_site
from carbon_app.inference.constraints.part import Layout, MotifRule, Token, motif_matrix
from carbon_app.inference.request import DesignRequest


def _motif(i: int) -> str:
    """The i-th 6-base motif (i < 4,096), each one different."""
    return "".join(BASES[(i >> (2 * j)) & 3] for j in range(6))


def _peak_bytes(call) -> tuple[int, object]:
    """(the peak of Python's allocations while `call` runs, what it raised or returned)."""
    tracemalloc.start()
    try:
        try:
            outcome = call()
        except InputError as exc:
            outcome = exc
        return tracemalloc.get_traced_memory()[1], outcome
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("longest", [10**9, 10**6, 81])
def test_a_homopolymer_bound_longer_than_the_design_and_its_junction_is_refused_before_any_table(longest):
    began = time.perf_counter()
    peak, outcome = _peak_bytes(lambda: DesignRequest.from_options("", 60, max_homopolymer=longest, seed=1))
    assert isinstance(outcome, InputError)
    assert str(outcome) == (f"the longest homopolymer ({longest:,}) is longer than the design's 60 bases and the "
                            f"{JUNCTION} prompt bases before them: give at most 80, or 0 for any length")
    assert peak < 2**20 and time.perf_counter() - began < 1


def test_a_homopolymer_bound_up_to_the_design_and_its_junction_is_taken_and_its_rule_costs_the_same():
    request = DesignRequest.from_options("", 60, max_homopolymer=60 + JUNCTION, seed=1)
    assert request.constraints.parts[0].max_homopolymer == 80
    layout = Layout(6, 0, 60, np.ones((60, 4), dtype=bool))
    began = time.perf_counter()
    peak, rule = _peak_bytes(lambda: RunRule(layout, 10**12))  # the rule's tables do not grow with the bound
    token = Token(3, 18, list(range(6)), "A" * 18, "A" * 10**5)
    assert rule.allowed(token).all() and peak < 2**20 and time.perf_counter() - began < 1


@given(longest=st.integers(1, 9), before=st.text("ATCGN", max_size=14), live_from=st.integers(0, 5),
       kmer=st.integers(0, 4**6 - 1))
def test_the_run_rule_allows_exactly_what_the_motif_rule_of_its_runs_allows(longest, before, live_from, kmer):
    layout = Layout(6, 0, 60, np.ones((60, 4), dtype=bool))
    runs = RunRule(layout, longest)
    motifs = MotifRule(layout, [motif_matrix(base * (longest + 1)) for base in BASES])
    token = Token(2, 12, list(range(live_from, 6)), "", before)
    assert runs.allowed(token)[kmer] == motifs.allowed(token)[kmer]
    assert (runs.allowed(token) == motifs.allowed(token)).all()


def test_the_sites_to_avoid_are_bounded_in_text_count_and_length_before_any_lookup():
    sent = "GAATTC," * (10 * 2**20 // 7)
    peak, outcome = _peak_bytes(lambda: DesignConstraints.from_options(avoid=sent))
    assert str(outcome) == (f"the sites to avoid are {7 * (10 * 2**20 // 7):,} characters; at most "
                            f"{MAX_LIST_CHARS:,} ({MAX_SITES} sites of up to {MAX_MOTIF_BASES} bases)")
    assert peak < 2**20
    many = ",".join(map(_motif, range(MAX_SITES + 1)))
    with pytest.raises(InputError, match=f"^{MAX_SITES + 1} sites to avoid were given; at most {MAX_SITES}$"):
        DesignConstraints.from_options(avoid=many)
    with pytest.raises(InputError, match=f"^{MAX_SITES + 1} sites to avoid were given; at most {MAX_SITES}$"):
        DesignConstraints.from_options(avoid=many.split(","))
    assert len(DesignConstraints.from_options(avoid=",".join(["EcoRI"] * 100)).parts[0].avoid) == 1  # repeats: one
    with pytest.raises(InputError, match=f"is {MAX_MOTIF_BASES + 1} characters; a motif may have at most "
                                         f"{MAX_MOTIF_BASES} bases"):
        DesignConstraints.from_options(avoid="A" * (MAX_MOTIF_BASES + 1))
    with pytest.raises(InputError, match="each site to avoid must be text"):
        DesignConstraints.from_options(avoid=["EcoRI", 7])
    for i in range(3000):  # a stream of new motifs: the look-up cache stays bounded
        resolve_site(_motif(i))
    assert resolve_site.cache_info().currsize <= 1024


def test_a_site_longer_than_the_design_and_its_junction_is_refused_by_name():
    with pytest.raises(InputError, match=r"^the site GCN{22}GC has 26 bases, more than the design's 5 bases and the "
                                         r"20 prompt bases before them: it could never be found there$"):
        DesignRequest.from_options("", 5, avoid="EcoRI, GC" + "N" * 22 + "GC", seed=1)
    assert DesignRequest.from_options("", 6, avoid="GC" + "N" * 22 + "GC", seed=1).n_bases == 6


def test_a_record_file_is_read_in_bounded_pieces(tmp_path):
    began = time.perf_counter()
    peak, outcome = _peak_bytes(lambda: read_fasta("/dev/zero"))
    assert "is not FASTA" in str(outcome) and peak < 8 * 2**20 and time.perf_counter() - began < 2
    big = tmp_path / "big.fa"
    with big.open("wb") as file:
        file.write(b">big\n")
        file.truncate(MAX_RECORD_FILE_BYTES + 1)
    peak, outcome = _peak_bytes(lambda: read_fasta(Path(big)))
    assert str(outcome) == (f"the FASTA file '{big}' is larger than {MAX_RECORD_FILE_BYTES // 2**20} MB; a genome is "
                            "read indexed instead (--reference)")
    assert peak < MAX_RECORD_FILE_BYTES * 1.2


def test_the_page_refuses_any_text_past_the_paste_limit_by_its_field_before_the_handler_runs():
    ran = []

    def design(model, prompt, **named):
        ran.append(model)
        yield prompt

    checked = guarded(design)
    assert list(checked("m", "ACGT", avoid="EcoRI")) == ["ACGT"]
    with pytest.raises(gr.Error, match=f"the avoid field is {MAX_PASTE_CHARS + 1:,} characters; the limit is "
                                       f"{MAX_PASTE_CHARS:,}"):
        list(checked("m", "ACGT", avoid="A" * (MAX_PASTE_CHARS + 1)))
    with pytest.raises(gr.Error, match="the prompt field is"):
        list(checked("m", "A" * (MAX_PASTE_CHARS + 1)))
    assert ran == ["m"]
