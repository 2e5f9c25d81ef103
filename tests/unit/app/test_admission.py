"""Who a visitor is, for the bound on each visitor's model jobs (`app.admission`)."""

from __future__ import annotations

import time

from carbon_app.app.admission import UploadBudget, client_of, refusal


def test_a_visitor_is_the_peer_with_no_proxy_and_what_the_outermost_proxy_saw_behind_proxies():
    assert client_of("203.0.113.9", None, 0) == "203.0.113.9"
    assert client_of("203.0.113.9", "198.51.100.4", 0) == "203.0.113.9"  # not behind a proxy: the header is a claim
    # one proxy (a Space): it appended the address it saw, the rightmost entry
    assert client_of("10.0.0.2", "198.51.100.4", 1) == "198.51.100.4"
    # what a visitor writes in the header itself stands to the left of what the proxy appends, and is not read
    assert client_of("10.0.0.2", "1.2.3.4, 198.51.100.4", 1) == "198.51.100.4"
    # two proxies: the outer one's entry, one from the right
    assert client_of("10.0.0.3", "1.2.3.4, 198.51.100.4, 10.0.0.2", 2) == "198.51.100.4"
    # fewer entries than proxies (a request that came in by an inner one): the leftmost there is
    assert client_of("10.0.0.3", "10.0.0.2", 2) == "10.0.0.2"
    assert client_of("10.0.0.2", " , ", 1) == "10.0.0.2"  # an empty header names nobody


def test_the_refusal_says_how_many_jobs_are_held_and_what_to_do():
    assert refusal(2).startswith("you already have 2 jobs waiting or running on this server")
    assert refusal(1).startswith("you already have 1 job waiting") and "stop one" in refusal(1)


def test_an_upload_budget_holds_each_visitor_to_an_hour_and_the_cache_to_its_cap(tmp_path, monkeypatch):
    mb = 2**20
    budget = UploadBudget(tmp_path, max_bytes=10 * mb, per_hour=8 * mb, request_bytes=6 * mb)
    assert budget.refusal("a", None)[0] == 411  # no size said
    assert budget.refusal("a", 7 * mb)[0] == 413
    assert budget.refusal("a", 3 * mb) is None and budget.refusal("a", 3 * mb) is None
    status, sentence = budget.refusal("a", 3 * mb)
    assert status == 429 and sentence.startswith("you have uploaded 6 MB in the last hour, and 8 MB is as much")
    assert budget.refusal("b", 3 * mb) is None  # another visitor: 9 MB counted in the cache
    status, sentence = budget.refusal("c", 3 * mb)
    assert status == 507 and "space for uploads (10 MB) is full" in sentence
    # the cache is measured on the disk again (here at once): what the clean-up removed is room again
    monkeypatch.setattr(UploadBudget, "RECOUNT_S", 0.0)
    (tmp_path / "kept").write_bytes(b"x" * mb)  # all that is left on the disk
    assert budget.refusal("c", 3 * mb) is None
    # an hour later the visitor's own uploads no longer count
    later = time.monotonic() + 3601
    monkeypatch.setattr("carbon_app.app.admission.time.monotonic", lambda: later)
    assert budget.refusal("a", 3 * mb) is None
