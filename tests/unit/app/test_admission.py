"""Who a visitor is, for the bound on each visitor's model jobs (`app.admission`)."""

from __future__ import annotations

from carbon_app.app.admission import client_of, refusal


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
