"""Every job of the app has a bound on its total work, checked before it starts, and stops when asked."""

from __future__ import annotations

import threading
import time

import pytest

from carbon_app.app.service import AppConfig, Service
from carbon_app.assets import ASSETS
from carbon_app.core.dna import read_fasta
from carbon_app.core.stopping import Stopped, stoppable
from carbon_app.errors import InputError
from carbon_app.inference.spec import resolve_spec

HBB = read_fasta(ASSETS / "examples" / "hbb.fa").sequence


@pytest.fixture(scope="module")
def bounded(demo_manager, tmp_path_factory):
    """A service whose jobs may read at most 5,000 windows."""
    return Service(demo_manager, AppConfig(models=["carbon-demo"], output_dir=tmp_path_factory.mktemp("bounded"),
                                           max_job_reads=5000))


def test_the_reads_a_job_asks_for_are_positions_times_alternates_times_frames_times_strands(demo):
    one = resolve_spec(demo, frames=6, strand_average=True)
    assert one.reads(alleles=1) == 2 * 6 * 2  # an alternate and its reference, in 6 frames on 2 strands
    assert resolve_spec(demo, frames=6, strand_average=True, context=10).reads(alleles=1) == (2 + 3 * 21) * 12
    assert one.reads(scanned=2000) == (3 * 2000 + 1) * 12  # the largest scan: within the default bound
    assert resolve_spec(demo, frames=1, strand_average=False).reads(alleles=5000) == 10_000
    assert AppConfig(models=[], output_dir=".").max_job_reads >= one.reads(scanned=2000)


def test_a_job_beyond_the_bound_is_refused_before_it_starts_and_names_it(bounded):
    with pytest.raises(InputError, match=r"this score with a context of 300 bases either side would read "
                                         r"21,660 windows \(6 frames, both strands\); this server runs at most "
                                         r"5,000 a job"):
        bounded.score("carbon-demo", HBB, "1206:A>T", None, context=300, frames=6, strand_average=True)
    with pytest.raises(InputError, match="this scan of 500 positions would read 18,012 windows"):
        bounded.scan("carbon-demo", HBB, 1001, 1500, frames=6, strand_average=True)
    assert bounded.running == 0
    small = bounded.score("carbon-demo", HBB, "1206:A>T", None, context=3, window=300)
    assert small.score.delta is not None and small.context is not None


def test_a_running_scan_stops_within_a_pass_of_windows_when_asked(service):
    asked, outcome, told = threading.Event(), [], []

    def scan() -> None:
        with stoppable(asked):
            try:
                service.scan("carbon-demo", HBB, 1, 2000, window=600, frames=6, strand_average=True,
                             progress=lambda done: told.append((asked.is_set(), done)))
                outcome.append("finished")
            except Stopped:
                outcome.append("stopped")

    stopped_before = service.stopped
    job = threading.Thread(target=scan)
    job.start()
    while len(told) < 3:  # a few passes in
        time.sleep(0.05)
    asked.set()
    job.join(timeout=120)
    assert outcome == ["stopped"], "the scan ran to its end"
    assert not any(after for after, _ in told)  # no pass of windows begun once asked: the one running was the last
    assert max(done for _, done in told) < 0.5
    assert service.stopped == stopped_before + 1 and service.running == 0
