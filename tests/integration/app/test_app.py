"""The web app: gradio_client against a launched server, and a real browser (Debian Chromium)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from benchmarks.soak import rss_mb, visitor
from carbon_app.app.formatting import METHOD_WORDS, delta_radius_words
from carbon_app.app.plots import BASE_COLOURS
from carbon_app.inference.generate import generate
from carbon_app.inference.request import MAX_SAMPLES
from carbon_app.inference.scan import scan_substitutions
from carbon_app.inference.score import score_variant
from tests.conftest import REPO, launch_app

HBB = json.loads((REPO / "assets" / "examples" / "hbb.json").read_text())

#: How long any wait for a computed result may last. Generous on purpose: a CI machine can be shared
#: and several times slower than a quiet one, and a wait returns as soon as its result is there, so a
#: long limit costs nothing when all is well. Speed is measured by the benchmarks, never here.
WAIT_S = 300


def hbb_sequence() -> str:
    from carbon_app.core.dna import read_fasta

    return read_fasta(REPO / "assets" / "examples" / "hbb.fa").sequence


def test_generate_api_matches_the_engine(client, demo):
    out = client.predict("carbon-demo", "fungus", "protein_coding", "ATGTCTGCTAAAGG", None, 40, "", "bp", 0.9, 0, 1.0,
                         7, 2, False, api_name="/generate")
    result = out[-1]
    expected = generate(demo, "ATGTCTGCTAAAGG", 40, species="fungus", region="protein_coding", seed=7, samples=2)
    assert result["sequences"] == expected.sequences
    assert result["prompt_ids"] == expected.prompt_ids
    assert "design 1" in out[0] and len(out[5]) == 4  # shown; FASTA, FASTA with the prompt, GenBank, JSON


def test_a_designs_results_are_shown_before_its_logo_is_drawn(client):
    job = client.submit("carbon-demo", "none", "none", "ATGTCTGCTAAAGG", None, 60, "", "bp", 0.9, 0, 1.0, 7, 2, False,
                        api_name="/generate")
    job.result(timeout=WAIT_S)
    *_, shown, last = job.outputs()
    assert "bases/s" in shown[4] and shown[-1]["sequences"] == last[-1]["sequences"]  # designs, checks, files
    assert shown[6] is None and last[6] is not None  # then the logo
    assert shown[2] == last[2] and shown[5] == last[5]


def test_speculative_toggle_gives_the_same_greedy_output(client):
    alone = client.predict("carbon-demo", "none", "none", "ACGTACGGTT", None, 61, "", "bp", 0, 0, 1.0, 0, 1, False,
                           api_name="/generate")[-1]
    drafted = client.predict("carbon-demo", "none", "none", "ACGTACGGTT", None, 61, "", "bp", 0, 0, 1.0, 0, 1, True,
                             api_name="/generate")[-1]
    assert drafted["sequences"] == alone["sequences"] and drafted["speculative"]["draft_model"] == "carbon-demo-draft"


def test_score_variant_api_matches_the_engine(client, demo):
    sickle = HBB["variants"][0]["variant"]
    out = client.predict("carbon-demo", "none", "none", hbb_sequence(), None, sickle, "", 1500, True, "chain",
                         "none", "", 0, api_name="/score_variant")
    expected = score_variant(demo, hbb_sequence(), sickle, window=1500, strand_average=True)
    assert expected.method == "chain"  # the engine reads carbon-demo as its card measured it
    assert out[-1]["delta"] == pytest.approx(expected.delta, abs=1e-4)
    assert "delta = LL(alt) − LL(ref)" in out[0] and "Research use only" in out[0]


def test_scan_api_matches_the_engine(client, demo):
    start, end = HBB["scan_region"][0], HBB["scan_region"][0] + 29
    out = client.predict("carbon-demo", "none", "none", hbb_sequence(), None, start, end, 1500, "marginal", "",
                         api_name="/scan")
    expected = scan_substitutions(demo, hbb_sequence(), start, end, window=1500, method="marginal")
    assert len(out[-1]["rows"]) == 90
    assert [row[3] for row in out[-1]["rows"]] == pytest.approx([row[3] for row in expected.rows()], abs=1e-4)


def test_models_api(client):
    table, pairing, data = client.predict(api_name="/models")
    assert "carbon-demo" in data["configured"] and "carbon-demo-draft" in pairing


@pytest.mark.parametrize("api, args, message", [  # the whole matrix runs in-process: tests/unit/core/test_validation.py
    ("/generate", ("carbon-demo", "none", "none", "ACGU", None, 10, "", "bp", 0.9, 0, 1.0, 0, 1, False), "RNA"),
    ("/score_variant", ("carbon-demo", "none", "none", "ACGTACGT", None, "3:A>G", "", 100, False, "marginal", "none",
                        "", 0), "has 'G' at position 3"),
    ("/scan", ("carbon-demo", "none", "none", "ACGTACGT", None, 5, 50, 100, "marginal", ""), "within the 8-base"),
    ("/score_vcf", ("carbon-demo", "none", "none", "HBB-locus-demo", None, 600, False, "marginal", 0), "upload a VCF"),
])
def test_bad_input_reaches_an_api_client_as_its_message_and_logs_no_traceback(client, server_out, api, args, message):
    from gradio_client.exceptions import AppError

    tracebacks = (server_out / "app.log").read_text().count("Traceback")
    with pytest.raises(AppError, match=message):
        client.predict(*args, api_name=api)
    assert (server_out / "app.log").read_text().count("Traceback") == tracebacks  # none logged for it


_DESIGN = dict(model="carbon-demo", species="none", region="none", prompt="ACGTAC", upload=None, n_bases=12, mask="",
               mode="bp", temperature=0.9, top_k=0, top_p=1.0, seed=0, samples=1, speculative=False)
_SCAN = dict(model="carbon-demo", species="none", region="none", sequence="ACGTACGTAC", upload=None, start=2, end=4,
             window=100, method="marginal", cds="")


def test_the_documented_client_call_works(client):
    import re

    page = (REPO / "docs" / "app.md").read_text()
    call = re.search(r"out = client\.predict\((.*?)\)\n", page, re.S).group(1)
    out = eval(f"client.predict({call})", {"client": client})  # noqa: S307 (the documentation's own example)
    assert len(out[-1]["sequences"]) == 2 and all(len(s) == 120 for s in out[-1]["sequences"])
    assert out[-1]["prompt_text"] == "<fungi_species><protein_coding_region><dna>ATGTCT"


def test_number_fields_at_their_limits_are_served(client):
    out = client.predict(*{**_DESIGN, "n_bases": 1, "samples": 1, "top_k": 0, "temperature": 0, "top_p": 1.0,
                           "seed": 2**63 - 1}.values(), api_name="/generate")
    assert len(out[-1]["sequences"][0]) == 1
    variant = client.predict("carbon-demo", "none", "none", "ACGTACGTAC", None, "3:G>A", "", 1, False, "marginal",
                             "none", "", 0, api_name="/score_variant")
    assert variant[-1]["frame_bases"] >= 1


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(playwright):
    """Debian's Chromium, headless, with nothing reaching out of the machine."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"])


def _new_page(browser, width: int, height: int):
    """A page whose waits for text (a result, a message) and `expect`s last up to WAIT_S (a loaded machine is slow,
    not failing); `page.asked_outside` lists every address beyond the app's own that it asked for (a font, a
    script, a report)."""
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_S * 1000)
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(WAIT_S * 1000)
    page.asked_outside = []
    page.on("request", lambda request: page.asked_outside.append(request.url)
            if urllib.parse.urlsplit(request.url).hostname not in (None, "127.0.0.1", "localhost") else None)
    return page


def _design_at_width(playwright, server: str, width: int, height: int, bases: int):
    """(browser, page): the page at `width` pixels, a design of `bases` bases after an ATG prompt asked for."""
    browser = _chromium(playwright)
    page = _new_page(browser, width, height)
    page.goto(server)
    page.get_by_label("DNA prompt (bases or FASTA; may be empty)", exact=True).fill("ATGGCTTCAGATCTCGAAG")
    page.get_by_label("Bases to generate (exact)", exact=True).fill(str(bases))
    page.get_by_role("button", name="Generate").click()
    return browser, page


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_a_person_in_a_browser_can_use_every_tab(server, server_out, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page = _design_at_width(p, server, 1400, 1800, 90)
        with _evidence_on_failure(page, tmp_path, server_out):
            _use_every_tab(page, tmp_path)
        assert page.asked_outside == []  # every font, script and style from the app itself: it works offline
        browser.close()
    shot = REPO.parent / "screenshots"
    if os.environ.get("CARBON_KEEP_SCREENSHOTS"):
        shot.mkdir(exist_ok=True)
        for png in tmp_path.glob("*.png"):
            shutil.copy(png, shot / png.name)


@contextlib.contextmanager
def _evidence_on_failure(page, tmp_path, server_out):
    """On a failure, the page as it was (a screenshot and its text) and the server log's end, in the report."""
    try:
        yield
    except Exception:
        shot = tmp_path / "failure.png"
        page.screenshot(path=str(shot), full_page=True)
        log = (server_out / "app.log").read_text()[-4000:]
        print(f"screenshot: {shot}\n--- page text ---\n{page.inner_text('body')[:6000]}\n--- app.log ---\n{log}")
        raise


def _rgb(hex_colour: str) -> str:
    """A #rrggbb colour as a browser's computed style writes it."""
    return "rgb({}, {}, {})".format(*(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)))


def _use_every_tab(page, tmp_path):
    """Every tab as a person uses it, after a first design."""
    page.get_by_text("design 1").first.wait_for()
    page.get_by_text("bases/s").first.wait_for()
    block = page.locator(".carbon-seq").first.inner_text()
    assert [line.split()[0] for line in block.splitlines()[1:]] == ["1", "61"]  # numbered lines of 60
    # the finished design's bases in their colours (the page's rules for its classes), as in the plots
    first_base = page.locator(".carbon-seq span[class^='b']").first
    assert first_base.evaluate("e => getComputedStyle(e).color") in {_rgb(c) for c in BASE_COLOURS.values()}
    assert page.get_by_role("button", name="Copy").count() >= 1 or page.locator("button[aria-label*='opy']").count()
    page.screenshot(path=str(tmp_path / "design.png"), full_page=True)
    page.get_by_text("Design constraints (enforced while sampling)").click()
    page.get_by_label("Protein to encode (one-letter code; sets the length)", exact=True).fill("MSKGEELFTGVV")
    page.get_by_label("Avoid sites (enzymes or IUPAC motifs)", exact=True).fill("BsaI, BsmBI")
    page.get_by_role("button", name="Generate").click()
    page.get_by_text("all 3 PASS").first.wait_for()
    page.screenshot(path=str(tmp_path / "design_constrained.png"), full_page=True)

    page.get_by_role("tab", name="Variant").click()
    variant_box = page.get_by_placeholder("120:A>G, 57:AT>A, 88:C>CTT in the sequence", exact=False)
    variant_box.fill(HBB["variants"][0]["variant"])
    page.get_by_label("Reference sequence (bases, FASTA or GenBank)", exact=True).fill(hbb_sequence())
    page.get_by_label("Context (bases either side, 0 = off)", exact=True).first.fill("3")
    page.get_by_role("button", name="Score variant").click()
    page.get_by_text("delta = LL(alt)").first.wait_for()
    page.get_by_text("possible substitutions within 3 bases").first.wait_for()
    # read, by default, in the setup the model's figures were measured with (its window, strands, method
    # and radius), and both the score's line and the note beside it say so
    quality = json.loads((REPO / "assets" / "models" / "carbon-demo" / "eval.json").read_text())["quality"]
    method, radius = METHOD_WORDS[quality["method"]], delta_radius_words(quality.get("delta_radius"))
    page.get_by_text(f"Read in {quality['window']:,}-base windows, 6 tokenization frames, both strands, with "
                     f"the {method}, {radius}.").first.wait_for()
    reading = method if quality.get("delta_radius") is None else f"{method}, each delta {radius}"
    # the note in one breath, how it was measured folded below it
    page.get_by_text("a small demo model: on held-out genes it tells stop-gains from synonymous changes with "
                     f"AUROC {quality['stop_gain_vs_synonymous_auroc']:.2f}").first.wait_for()
    measured = page.get_by_text(f"1,200-base windows with the {reading} (as here): stop-gain vs synonymous AUROC "
                                f"{quality['stop_gain_vs_synonymous_auroc']:.2f}").first
    assert not measured.is_visible()
    page.get_by_text("How this was measured").first.click()
    measured.wait_for()
    page.screenshot(path=str(tmp_path / "variant.png"), full_page=True)
    variant_box.fill("1206:G>A")
    page.get_by_role("button", name="Score variant").click()
    page.get_by_text("has 'A' at position 1206").first.wait_for()
    assert page.get_by_text("delta = LL(alt)").count() == 0  # the earlier result is gone, not beside the error
    page.screenshot(path=str(tmp_path / "variant_error.png"), full_page=True)

    page.get_by_role("tab", name="Mutation scan").click()
    page.get_by_label("Sequence (bases, FASTA or GenBank)", exact=True).fill(hbb_sequence()[1100:1400])
    page.get_by_label("Region start (1-based)", exact=True).fill("80")
    page.get_by_label("Region end", exact=True).fill("110")
    page.get_by_role("button", name="Scan every substitution").click()
    page.get_by_text("substitutions scored").first.wait_for()
    assert not page.get_by_text("By consequence").is_visible()  # no coding sequence: no empty plot either
    assert _plots_without_collisions(page, 1) == 1  # the heatmap: its legend clear of its axis titles
    assert page.locator(".js-plotly-plot .legend").get_by_text("the reference base (no substitution)").is_visible()
    page.screenshot(path=str(tmp_path / "scan.png"), full_page=True)

    page.get_by_role("tab", name="VCF batch").click()
    page.locator("input[type=file][accept*='.vcf']").set_input_files(str(REPO / "assets" / "examples" / HBB["vcf"]))
    page.get_by_label("Window (bases)", exact=True).first.fill("300")
    page.get_by_role("button", name="Score VCF").click()
    page.get_by_text("7 records, 8 ALT alleles: 7 scored").first.wait_for()
    page.get_by_text("REF_mismatch").first.wait_for()
    page.screenshot(path=str(tmp_path / "vcf.png"), full_page=True)

    page.get_by_role("tab", name="Models").click()
    page.get_by_text("drafts with").first.wait_for()
    page.get_by_text("is a small demonstration model").first.wait_for()  # the summary opens the tab
    page.get_by_role("button", name="Load", exact=True).click()
    page.get_by_text("The full model card").first.click()  # folded below the summary
    page.get_by_text("Demo only").first.wait_for()
    page.screenshot(path=str(tmp_path / "models.png"), full_page=True)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.parametrize("width", [1400, 400])
def test_in_the_browser_numbers_are_refused_by_name_and_stop_stops_a_design(server, client, width):
    """(The numbers at desktop width; Stop at both, the phone's Stop button on screen and big enough to hit.)"""
    from playwright.sync_api import sync_playwright

    stopped_before = _stopped(client)
    with sync_playwright() as p:
        browser = _chromium(p)
        page = _new_page(browser, width, 1800)
        page.goto(server)
        bases = page.get_by_label("Bases to generate (exact)", exact=True)
        if width > 1000:
            for value, message in (("0", "the number of bases must be at least 1, not 0"),
                                   ("2.5", "the number of bases must be a whole number, not 2.5")):
                bases.fill(value)
                page.get_by_role("button", name="Generate").click()
                page.get_by_text(message).first.wait_for()
            page.get_by_label("Samples (1-64)", exact=True).fill("65")
            bases.fill("12")
            page.get_by_role("button", name="Generate").click()
            page.get_by_text("the number of samples must be between 1 and 64, not 65").first.wait_for()

        # the longest design the demo model makes (its context holds 1,530 new bases), 64 at once: about 6 s on
        # an idle core, so the Stop lands halfway even when a loaded machine delays the click by seconds
        page.get_by_label("Samples (1-64)", exact=True).fill("64")
        bases.fill("1500")
        page.get_by_role("button", name="Generate").click()
        page.get_by_text("generating…").first.wait_for()
        stop = page.get_by_role("button", name="Stop", exact=True)
        box = stop.bounding_box()
        assert box["width"] >= 44 and box["height"] >= 30 and box["x"] + box["width"] <= width  # a thumb's target
        cancels = []  # what the page asked the server, for a failure's message
        page.on("request", lambda request: cancels.append(f"sent {request.post_data}")
                if request.url.endswith("/cancel") else None)
        page.on("response", lambda response: cancels.append(f"answered {response.status}")
                if response.url.endswith("/cancel") else None)
        stop.click()
        # with the page still open: the button itself stopped it, not a closed connection
        assert _idle(client), "the stopped design still holds its request"
        assert _stopped(client) == stopped_before + 1, (page.get_by_text("bases/s").count(), cancels)
        assert page.get_by_text("bases/s").count() == 0  # it never finished
        # and the page says so, keeps what was made and offers it: no "generating…" left for good
        said = page.get_by_text("Stopped after").first
        said.wait_for()
        made, asked = (int(n.replace(",", "")) for n in re.search(r"Stopped after ([\d,]+) of ([\d,]+) bases",
                                                                   said.inner_text()).groups())
        assert 0 < made < asked == 1500 and page.get_by_text("generating…").count() == 0
        fasta = _downloaded(page, "designs.fa")
        assert fasta.count(">design_") == 64 and all(f"bases={made}" in line for line in fasta.splitlines()
                                                     if line.startswith(">"))
        browser.close()


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_at_phone_width_the_check_report_scrolls_instead_of_collapsing(server, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page = _design_at_width(p, server, 400, 1600, 60)
        header = page.get_by_role("columnheader", name="reading frame")
        header.wait_for()
        assert header.bounding_box()["width"] > 60  # a column, not one letter per line
        table = page.locator(".carbon-table table").first
        assert table.evaluate("t => getComputedStyle(t).overflowX") == "auto"
        assert table.evaluate("t => t.scrollWidth > t.clientWidth")  # wider than the phone: it scrolls
        # the designs wrap in numbered lines inside their own scroller: the page itself never scrolls sideways
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.screenshot(path=str(tmp_path / "phone_design.png"), full_page=True)
        browser.close()


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_a_press_while_the_last_design_still_draws_its_logo_is_not_lost(server):
    """The designs are shown before their logo is drawn; a person who changes a field and presses
    Generate at once gets the new design, not a button that silently did nothing."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page = _design_at_width(p, server, 1400, 1800, 90)
        page.get_by_text("design 1 (90 bases)").first.wait_for()
        page.get_by_text("bases/s").first.wait_for()
        page.get_by_label("Bases to generate (exact)", exact=True).fill("33")
        page.get_by_role("button", name="Generate").click()  # the 90-base design's logo is still being drawn
        page.get_by_text("design 1 (33 bases)").first.wait_for()
        browser.close()


def _running(client) -> int:
    return client.predict(api_name="/models")[2]["requests_running"]


def _stopped(client) -> int:
    return client.predict(api_name="/models")[2]["requests_stopped_early"]


def _idle(client, seconds: float = WAIT_S) -> bool:
    """Whether the server's running requests drop to 0 within `seconds` (a stream's generator
    is closed just after its client has the last result, or when it is dropped)."""
    deadline = time.time() + seconds
    while _running(client):
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture()
def leak_check_server(tmp_path):
    """A server of its own whose freed buffers go straight back to the system: with glibc's
    mmap threshold fixed at 128 KB, its heap cannot keep freed tensors, so the resident size
    after a burst is what the app holds, not what the allocator chose to retain (that part
    levels off by itself, near 1 GB here, as the soak run shows)."""
    process, url = launch_app(tmp_path, MALLOC_MMAP_THRESHOLD_="131072")
    yield process, url
    process.terminate()
    process.wait(timeout=30)


def test_sixteen_clients_at_once_get_the_serial_answers_and_memory_returns(leak_check_server):
    """Mixed requests from 16 clients share one GPU queue, get exactly what they get one by
    one, and leave the server with nothing running and no lasting memory growth. (Each request is
    small: what is tested is the sharing, 64 requests of it, not the work.)"""
    from concurrent.futures import ThreadPoolExecutor

    from gradio_client import Client

    process, server = leak_check_server
    client = Client(server, verbose=False)
    seq = hbb_sequence()
    requests = []
    for i in range(16):
        if i % 3 == 0:
            requests.append(("/generate", ("carbon-demo", "mammal", "none", "ATGGTGCA", None, 60 + i, "", "bp", 0.9, 0,
                                           1.0, i, 2, i % 2 == 0)))
        elif i % 3 == 1:
            requests.append(("/score_variant", ("carbon-demo", "none", "none", seq, None, HBB["variants"][i % 2]
                                                ["variant"], "", 400 + i, False, "marginal", "none", "", 0)))
        else:
            requests.append(("/scan", ("carbon-demo", "none", "none", seq, None, 1195 + i, 1197 + i, 400,
                                       "marginal", "")))

    def key(api, out):
        result = out[-1]
        return result["sequences"] if api == "/generate" else (
            round(result["delta"], 6) if api == "/score_variant" else [round(r[3], 6) for r in result["rows"]])

    serial = [key(api, client.predict(*args, api_name=api)) for api, args in requests]

    def one(numbered):
        i, (api, args) = numbered
        return key(api, Client(server, verbose=False, headers=visitor(i)).predict(*args, api_name=api))

    after = []
    for _ in range(3):  # the first burst pays one-off costs (threads, allocator pools); later ones must not grow
        with ThreadPoolExecutor(max_workers=16) as pool:
            assert list(pool.map(one, enumerate(requests))) == serial
        assert _idle(client)
        after.append(rss_mb(process.pid))
    # MB: no per-request state is kept (the resident size of a busy server swings by tens of MB)
    assert after[2] - after[1] < 100, after


def test_a_cancelled_stream_releases_its_request_and_the_queue_moves_on(client):
    stopped = _stopped(client)
    job = client.submit("carbon-demo", "none", "none", "ATGGTGCA", None, 1400, "", "bp", 0.9, 0, 1.0, 5, 64, False,
                        api_name="/generate")
    deadline = time.time() + WAIT_S
    while time.time() < deadline and not job.outputs():  # the first partial result has arrived
        time.sleep(0.05)
    assert job.outputs() and not job.done()
    job.cancel()
    assert _idle(client) and _stopped(client) == stopped + 1  # stopped, not run to its end
    quick = client.predict("carbon-demo", "none", "none", "ATGGTGCA", None, 12, "", "bp", 0, 0, 1.0, 0, 1, False,
                           api_name="/generate")[-1]
    assert quick["done"] and len(quick["sequences"][0]) == 12


def test_a_visitor_holds_two_model_jobs_at_most_and_others_get_in_beside_them(server):
    """CARBON_JOBS_PER_CLIENT (2): a visitor's third model job is refused at once with its sentence, while the
    same visitor's quick page events and another visitor's job are taken; once one of the two ends, the first
    visitor may send again."""
    import httpx
    from gradio_client import Client

    ana, ben = (Client(server, verbose=False, headers=visitor(i)) for i in (201, 202))
    long = ("carbon-demo", "none", "none", "ATGGTGCA", None, 1400, "", "bp", 0.9, 0, 1.0, 5, 64, False)
    quick = ("carbon-demo", "none", "none", "ATGGTGCA", None, 12, "", "bp", 0, 0, 1.0, 0, 1, False)
    held = [ana.submit(*long, api_name="/generate") for _ in range(2)]
    deadline = time.time() + WAIT_S
    while time.time() < deadline and not any(job.outputs() for job in held):  # one runs, the other waits
        time.sleep(0.05)
    began = time.time()
    with pytest.raises(httpx.HTTPStatusError) as refused:
        ana.submit(*quick, api_name="/generate").result(timeout=WAIT_S)
    assert time.time() - began < 5  # refused at once, not after a wait in the queue
    assert refused.value.response.status_code == 429
    assert refused.value.response.json()["detail"].startswith("you already have 2 jobs waiting or running")
    assert "carbon-demo-draft" in ana.predict("carbon-demo-draft", api_name="/model_card")  # not a model job
    bens = ben.submit(*quick, api_name="/generate")  # another visitor: taken, and served once the model is free
    for job in held:
        job.cancel()
    assert bens.result(timeout=WAIT_S)[-1]["done"]
    assert ana.predict(*quick, api_name="/generate")[-1]["done"]  # nothing of ana's is held any more


def test_a_model_card_is_read_while_a_long_request_holds_the_model(client):
    region = HBB["scan_region"][0]
    job = client.submit("carbon-demo", "none", "none", hbb_sequence(), None, region, region + 40, 1500, "marginal", "",
                        api_name="/scan")  # one step of some twenty seconds on the model thread
    deadline = time.time() + WAIT_S
    while time.time() < deadline and not client.predict(api_name="/models")[2]["requests_running"]:
        time.sleep(0.05)
    card = client.predict("carbon-demo-draft", api_name="/model_card")
    assert "carbon-demo-draft" in card and "Demo only" in card
    assert client.predict(api_name="/models")[2]["requests_running"] == 1  # answered while the scan still ran
    assert len(job.result(timeout=WAIT_S)[-1]["rows"]) == 123


def test_a_client_that_disconnects_mid_stream_releases_its_request(server, client):
    """A client process killed while its design streams (a closed tab, a lost connection)."""
    script = (
        "import sys, time\n"
        "from gradio_client import Client\n"
        f"job = Client({server!r}, verbose=False).submit('carbon-demo', 'none', 'none', 'ATGGTGCA', None, 1400, '',"
        " 'bp', 0.9, 0, 1.0, 6, 64, False, api_name='/generate')\n"
        f"deadline = time.time() + {WAIT_S}\n"
        "while not job.outputs() and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('streaming' if job.outputs() else 'nothing streamed', flush=True)\n"
        "time.sleep(600)\n")
    stopped = _stopped(client)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "streaming"
        assert _running(client) == 1
    finally:
        process.kill()
        process.wait(timeout=30)
    assert _idle(client) and _stopped(client) == stopped + 1


def _long_scan(client):
    """A 2,000-position scan of HBB in both strands: minutes of work on this machine."""
    return client.submit("carbon-demo", "none", "none", hbb_sequence(), None, 1, 2000, 600, "marginal", "", True,
                         api_name="/scan")


@pytest.mark.parametrize("drop", ["cancel", "disconnect"])
def test_a_long_job_that_is_dropped_stops_within_seconds_and_frees_the_model(server, server_out, client, drop):
    """A scan (one result, no stream) cancelled through the API, or whose client process dies (a closed tab):
    it stops at its next pass of windows, not minutes later, and the next request runs at once; the stop is
    not logged as an error (a step nobody waits for any more)."""
    stopped = _stopped(client)
    tracebacks = (server_out / "app.log").read_text().count("Traceback")
    if drop == "cancel":
        job = _long_scan(client)
    else:
        script = ("import time\nfrom gradio_client import Client\n"
                  f"Client({server!r}, verbose=False).submit('carbon-demo', 'none', 'none', {hbb_sequence()!r}, None, "
                  "1, 2000, 600, 'marginal', '', True, api_name='/scan')\ntime.sleep(600)\n")
        process = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + WAIT_S
    while time.time() < deadline and not _running(client):
        time.sleep(0.05)
    time.sleep(2)  # well into the scan
    dropped_at = time.time()
    if drop == "cancel":
        job.cancel()
    else:
        process.kill()
        process.wait(timeout=30)
    from gradio_client import Client

    # asked through a client of its own: the cancelling one's event stream may close under a request it still has
    # open (gradio_client then raises CancelledError for that request too)
    watcher = Client(server, verbose=False)
    assert _idle(watcher, seconds=30), "the dropped scan still holds the model"
    quick = watcher.predict("carbon-demo", "none", "none", "ATGGTGCA", None, 12, "", "bp", 0, 0, 1.0, 0, 1, False,
                            api_name="/generate")[-1]
    assert quick["done"] and time.time() - dropped_at < 30  # not the scan's minutes
    assert _stopped(watcher) == stopped + 1
    assert (server_out / "app.log").read_text().count("Traceback") == tracebacks


def test_an_overloaded_queue_answers_busy_instead_of_growing(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from gradio_client import Client
    from gradio_client.utils import QueueError

    process, url = launch_app(tmp_path, CARBON_QUEUE_SIZE="2")
    try:
        def long_design(seed):
            try:
                Client(url, verbose=False, headers=visitor(seed)).predict(
                    "carbon-demo", "none", "none", "ATGGTGCA", None, 700, "", "bp", 0.9, 0, 1.0, seed, 8, False,
                    api_name="/generate")
                return "served"
            except QueueError as exc:
                return str(exc)

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(long_design, range(8)))
        busy = [a for a in answers if a != "served"]
        assert busy and all("Queue is full" in a and "try again" in a for a in busy)
        assert answers.count("served") >= 3  # one running and two waiting always get through
        assert _idle(Client(url, verbose=False))
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_ranking_that_cannot_run_leaves_the_delta_and_says_why(tmp_path):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    # a budget that holds the delta's windows (1,500 bases) but not the ranking's batches beside them
    process, url = launch_app(tmp_path, CARBON_MEMORY_BUDGET_GB="0.15")
    try:
        job = Client(url, verbose=False).submit("carbon-demo", "none", "none", hbb_sequence(), None, "1206:A>T", "",
                                                1500, False, "marginal", "none", "", 2, api_name="/score_variant")
        with pytest.raises(AppError, match="memory budget"):
            job.result(timeout=WAIT_S)
        outputs = job.outputs()  # the delta, the ranking's failure (and, on a slow machine, heartbeats between)
        first, last = outputs[0], outputs[-1]
        assert "delta = LL(alt)" in first[0] and "ranking it among every substitution within 2 bases" in first[0]
        assert "delta = LL(alt)" in last[0] and "not ranked:" in last[0] and "memory budget" in last[0]
        assert "ranking it" not in last[0]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_soak_script_reports_a_short_run():
    from benchmarks.soak import main as soak_main

    report = soak_main(["--seconds", "8", "--clients", "2", "--max-requests", "12"])
    assert report["served"] > 0 and report["errors"] == 0
    assert report["p50_s"] <= report["p95_s"] and report["server_rss_mb_end"] > 0


@pytest.mark.parametrize("path", [
    "gradio_api/file=/etc/passwd",
    "gradio_api/file=../../../../etc/passwd",
    "gradio_api/file=%2Fetc%2Fpasswd",
    f"gradio_api/file={REPO / 'app.py'}",
    f"gradio_api/file={REPO / 'assets' / 'models' / 'carbon-demo' / 'config.json'}",
    "file=/etc/passwd",
])
def test_no_file_outside_what_the_app_serves_can_be_read(server, path):
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(server + path, timeout=10) as response:
            body = response.read()
        assert b"root:" not in body and b"import" not in body and b"hidden_size" not in body
    except urllib.error.HTTPError as exc:
        assert exc.code in (403, 404)


def test_the_bundled_example_is_served(server):
    import urllib.request

    url = f"{server}gradio_api/file={REPO / 'assets' / 'examples' / 'hbb.fa'}"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read().startswith(b">")


def test_a_variant_at_coordinates_says_its_consequence_context_and_link(client, demo):
    from carbon_app.genome.reference import Reference
    from carbon_app.genome.scoring import describe_at

    sickle = f"{HBB['genome_contig']}:{HBB['variants'][0]['variant']}"
    out = client.predict(model="carbon-demo", species="none", region="none", reference="", upload=None, change=sickle,
                         alternate="", window=300, strand=False, method="marginal", genome="HBB-locus-demo",
                         cds=HBB["hbb_cds"], context=3, api_name="/score_variant")
    _, expected = describe_at(demo, Reference(REPO / "assets" / "examples" / "hbb.fa"), sickle, HBB["hbb_cds"], 3,
                              window=300, method="marginal", strand_average=False)
    assert out[-1]["delta"] == pytest.approx(expected.score.delta, abs=1e-4)
    assert out[-1]["context"]["more_damaging_than"] == pytest.approx(expected.context.more_damaging_than)
    assert "**Consequence:** missense p.Glu7Val (GAG>GTG)" in out[0]
    assert "of the 20 possible substitutions within 3 bases" in out[0]
    from urllib.parse import parse_qs, urlsplit

    query = urlsplit(out[5].split("](")[1].split(")")[0]).query
    link = {key: values[0] for key, values in parse_qs(query).items()}
    # every setting that changes the number, as the score used it (carbon-demo's own frames and radius included)
    assert link == {"genome": "HBB-locus-demo", "variant": sickle, "model": "carbon-demo", "cds": HBB["hbb_cds"],
                    "context": "3", "window": "300", "strand": "0", "method": "marginal", "frames": "6", "radius": "6",
                    "species": "none", "region": "none"}


def test_a_variants_score_is_shown_before_its_context_is_ranked(client):
    sickle = HBB["variants"][0]["variant"]
    job = client.submit("carbon-demo", "none", "none", hbb_sequence(), None, sickle, "", 300, False, "marginal",
                        "none", HBB["hbb_cds"], 4, api_name="/score_variant")
    final = job.result(timeout=WAIT_S)
    first, last = job.outputs()  # one update as soon as the delta is known, one with its context
    assert "ranking it among every substitution within 4 bases…" in first[0] and "more damaging than" not in first[0]
    assert "context" not in first[-1] and first[-1]["delta"] == last[-1]["delta"]
    assert "of the 26 possible substitutions within 4 bases" in last[0] and "ranking it" not in last[0]
    assert last[-1]["context"]["substitutions"] == 26 and final == last
    assert first[1] == last[1]  # the tracks are drawn once, and sent with every update


def test_a_vcf_upload_comes_back_annotated_with_a_table_and_a_plot(client, demo):
    import pysam
    from gradio_client import handle_file

    from carbon_app.genome.reference import Reference
    from carbon_app.genome.scoring import score_at

    summary, plot, table, files = client.predict(
        "carbon-demo", "none", "none", "HBB-locus-demo", handle_file(str(REPO / "assets" / "examples" / HBB["vcf"])),
        300, False, "marginal", 0, api_name="/score_vcf")
    assert "7 records, 8 ALT alleles: 7 scored" in summary and "1 not scored: REF_mismatch" in summary
    assert table["headers"][:4] == ["pos", "ref", "alt", "delta"]  # what a phone shows without scrolling
    rows = [dict(zip(table["headers"], row, strict=True)) for row in table["data"]]
    assert [r["id"] for r in rows] == ["HbC", "HbS", "HbS", "HbE", "IVS-I-1", "IVS-I-110", "codon39", "wrong_ref"]
    assert rows[-1]["delta"] is None and rows[-1]["problem"] == "REF_mismatch"
    reference = Reference(REPO / "assets" / "examples" / "hbb.fa")
    for row in rows[:-1]:
        alone = score_at(demo, reference, f"{row['chrom']}:{row['pos']}:{row['ref']}>{row['alt']}", window=300,
                         method="marginal", strand_average=False)
        assert row["delta"] == pytest.approx(alone.delta, abs=1e-4)
    vcf = next(f for f in files if f.endswith(".vcf.gz"))
    records = list(pysam.VariantFile(vcf))
    assert len(records) == 7 and records[1].info["CARBON_DELTA"][1] == pytest.approx(rows[2]["delta"], abs=1e-5)
    assert records[0].info["NOTE"].startswith("HBB_c.19G>A")  # the input's own INFO passes through
    assert plot is not None


def test_a_scan_with_a_coding_sequence_names_each_consequence(client):
    start = HBB["scan_region"][0]
    out = client.predict("carbon-demo", "none", "none", hbb_sequence(), None, start, start + 8, 300, "marginal",
                         HBB["hbb_cds"], api_name="/scan")
    rows = out[-1]["rows"]
    assert len(rows) == 27 and rows[0][:3] == [start, "A", "C"]
    assert rows[0][4] == "start-loss p.Met1Leu (ATG>CTG) [c.1A>C]"
    assert "| synonymous |" in out[3] and "| missense |" in out[3]
    assert out[1] is not None


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_a_shared_link_opens_the_variant_tab_on_its_inputs_and_scores_them(server, server_out):
    from urllib.parse import urlencode

    from playwright.sync_api import sync_playwright

    query = urlencode({"genome": "HBB-locus-demo", "variant": f"{HBB['genome_contig']}:1206:A>T", "window": 300,
                       "cds": HBB["hbb_cds"], "context": 0})
    log = server_out / "app.log"
    tracebacks = log.read_text().count("Traceback")
    with sync_playwright() as p:
        browser = _chromium(p)
        plain = _new_page(browser, 1400, 1600)
        plain.goto(server)  # a plain visit runs the same load events, with no link to read
        plain.get_by_role("button", name="Generate").wait_for()
        page = _new_page(browser, 1400, 1600)
        page.goto(f"{server}?{query}")
        # scored once the plain visit's load events have run: one queue serves both pages, in turn
        page.get_by_text("missense p.Glu7Val").first.wait_for()
        box = page.get_by_placeholder("120:A>G, 57:AT>A, 88:C>CTT in the sequence", exact=False)
        assert box.input_value() == f"{HBB['genome_contig']}:1206:A>T"
        link = page.get_by_role("link", name="Link to this result")
        assert query.split("&cds")[0].replace("window=300", "") in link.get_attribute("href").replace(
            "&model=carbon-demo", "").replace("window=300", "")
        assert link.get_attribute("href").startswith(server)
        browser.close()
    assert log.read_text().count("Traceback") == tracebacks  # neither visit raised in the app


#: every setting that changes a score, each away from carbon-demo's own (1,200 bases, both strands, the chain
#: rule, 6 frames, radius 6, no tags; the tab's context 25)
NOT_OWN = {"window": 600, "strand_average": False, "method": "marginal", "frames": 3, "delta_radius": 10,
           "species": "mammal", "region": "protein_coding", "context": 2}


def _choose(page, label: str, option: str) -> None:
    """Pick `option` in the visible dropdown labelled `label`, as a person does: open it, click the option."""
    page.get_by_label(label, exact=True).filter(visible=True).first.click()
    page.get_by_role("option", name=option, exact=True).filter(visible=True).first.click()


def _visible(page, label: str, exact: bool = True):
    return page.get_by_label(label, exact=exact).filter(visible=True).first


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_a_shared_link_carries_every_setting_and_reopens_on_the_same_number(server, server_out, demo, tmp_path):
    """Tags chosen for a design stay on the Design tab; on the Variant tab every setting is set away from the
    model's own (tags, method, frames, strands, window, radius, context): the score is the engine's for those
    settings, each difference is named beside it, and the link reopens the page on the identical result."""
    from playwright.sync_api import expect, sync_playwright

    from carbon_app.genome.reference import Reference
    from carbon_app.genome.scoring import describe_at

    change = f"{HBB['genome_contig']}:1206:A>T"
    settings = {key: value for key, value in NOT_OWN.items() if key != "context"}
    _, expected = describe_at(demo, Reference(REPO / "assets" / "examples" / HBB["file"]), change,
                              context=NOT_OWN["context"], **settings)
    with sync_playwright() as p:
        browser = _chromium(p)
        page = _new_page(browser, 1400, 1800)
        page.goto(server)
        with _evidence_on_failure(page, tmp_path, server_out):
            _choose(page, "Species tag", "plant")  # a design's tag, on the Design tab
            page.get_by_role("tab", name="Variant").click()
            expect(_visible(page, "Genome")).to_be_visible()
            _choose(page, "Genome", "HBB-locus-demo")
            page.get_by_placeholder("120:A>G, 57:AT>A, 88:C>CTT in the sequence", exact=False).fill(change)
            _visible(page, "Window (bases, centred on the variant)").fill(str(NOT_OWN["window"]))
            _visible(page, "Average with the reverse-complement strand").uncheck()
            _choose(page, "Scoring", "reference FNS marginals")
            _visible(page, "Context (bases either side, 0 = off)").fill(str(NOT_OWN["context"]))
            page.get_by_text("More of the scoring setup").filter(visible=True).first.click()
            assert _visible(page, "Species tag").input_value() == "none"  # the design's tag did not come along
            _choose(page, "Species tag", NOT_OWN["species"])
            _choose(page, "Region tag", NOT_OWN["region"])
            _visible(page, "Tokenization frames averaged").fill(str(NOT_OWN["frames"]))
            # (a text box's label holds its info line too)
            _visible(page, "Delta radius (bases either side, or 'whole')", False).fill(str(NOT_OWN["delta_radius"]))
            page.get_by_role("button", name="Score variant").click()
            page.get_by_text("possible substitutions within 2 bases").first.wait_for()
            shown = _variant_result(page)
            assert f"delta = LL(alt) − LL(ref) = {expected.score.delta:+.4f}" in shown[0]
            assert f"{expected.context.sentence()}" in page.inner_text("body")
            for named in ("window 600 (model's own: 1,200)", "frames 3 (model's own: 6)",
                          "strands one (model's own: both)", "method marginal (model's own: chain)",
                          "radius 10 bases (model's own: 6 bases)", "species tag mammal (model's own: none)",
                          "region tag protein_coding (model's own: none)"):
                assert named in shown[1], named
            link = page.get_by_role("link", name="Link to this result").get_attribute("href")
            reopened = _new_page(browser, 1400, 1800)
            reopened.goto(link)
            reopened.get_by_text("possible substitutions within 2 bases").first.wait_for()
            assert _variant_result(reopened) == shown  # the identical number, setup and ranking
            reopened.get_by_text("More of the scoring setup").filter(visible=True).first.click()
            assert _visible(reopened, "Species tag").input_value() == NOT_OWN["species"]  # the form shows them
        browser.close()


def _variant_result(page) -> tuple[str, str, str]:
    """The Variant tab's verdict line, the line that names what made the score, and the ranking's sentence."""
    return (page.get_by_text("delta = LL(alt)").first.inner_text(),
            page.get_by_text("Scored with model").first.inner_text(),
            page.get_by_text("possible substitutions within").first.inner_text())


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.parametrize("width", [1400, 400])
def test_a_protein_sets_the_length_in_the_form_and_a_short_mask_is_padded_before_generate(server, width):
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = _chromium(p)
        page = _new_page(browser, width, 1600)
        page.goto(server)
        bases = page.get_by_label("Bases to generate (exact)", exact=True)
        expect(bases).to_have_value("300")
        page.get_by_text("Design constraints (enforced while sampling)").click()
        page.get_by_label("Protein to encode (one-letter code; sets the length)", exact=True).fill("MSKGEELFTGVV")
        expect(bases).to_have_value("36")  # the Bases field follows the protein's codons
        page.get_by_text("the design will have 36 bases, encoded from its first base").first.wait_for()
        mask = page.get_by_label("Per-position mask (IUPAC over the new bases, optional)")
        mask.fill("ATG")
        page.get_by_text("the mask has 3 positions but the design will have 36 bases").first.wait_for()
        page.get_by_role("button", name="Pad with N after").click()
        expect(mask).to_have_value("ATG" + "N" * 33)
        page.get_by_text("✓ mask of 36 positions").first.wait_for()
        page.get_by_role("button", name="Generate", exact=True).click()
        page.get_by_text("bases/s").first.wait_for()  # made: no conflict left for Generate to find
        assert page.get_by_text("mask has 300 positions").count() == 0
        browser.close()


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.parametrize("width", [1400, 400])
def test_a_scan_and_a_ranking_say_how_many_are_done_and_how_long_is_left(server, width):
    """As the VCF tab does: the scan and the context ranking count their substitutions done of all, and say
    about how long is left, while they run."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _chromium(p)
        page = _new_page(browser, width, 1600)
        page.goto(server)
        page.get_by_role("tab", name="Models").wait_for()  # the tab bar laid out (on a phone too)
        page.get_by_role("tab", name="Mutation scan").click()
        page.get_by_label("Sequence (bases, FASTA or GenBank)", exact=True).fill(hbb_sequence())
        page.get_by_label("Region start (1-based)", exact=True).fill("1001")
        page.get_by_label("Region end", exact=True).fill("1300")
        _visible(page, "Window (bases)").fill("600")
        page.get_by_role("button", name="Scan every substitution").click()
        page.get_by_text(re.compile(r"scanning: [\d,]+ of 900 substitutions \(\d+%\) in \d+ s, about \d+ s left")
                         ).first.wait_for()
        page.get_by_text("substitutions scored").first.wait_for()
        # 300 positions: the heatmap opens on 100 of them (a slider for the rest), and on a phone keeps readable
        # columns by scrolling sideways in its own box, the page not
        page.wait_for_function("() => document.querySelector('.carbon-wide-plot .js-plotly-plot')?._fullLayout")
        pixels, box = page.evaluate("""() => { const p = document.querySelector('.carbon-wide-plot .js-plotly-plot');
          const box = p.closest('.carbon-wide-plot'), x = p._fullLayout.xaxis;
          return [x._length / (x.range[1] - x.range[0]),
                  [box.clientWidth, box.scrollWidth, getComputedStyle(box).overflowX]]; }""")
        assert pixels >= 6, pixels  # pixels a position
        assert width > 640 or (box[1] > box[0] and box[2] == "auto"), box
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.get_by_role("tab", name="Variant").click()
        page.get_by_placeholder("120:A>G, 57:AT>A, 88:C>CTT in the sequence", exact=False).fill("1206:A>T")
        page.get_by_label("Reference sequence (bases, FASTA or GenBank)", exact=True).fill(hbb_sequence())
        _visible(page, "Context (bases either side, 0 = off)").fill("40")
        page.get_by_role("button", name="Score variant").click()
        page.get_by_text(re.compile(r"ranking: [\d,]+ of 242 nearby substitutions \(\d+%\) in \d+ s, about "
                                    r"\d+ s left")).first.wait_for()
        page.get_by_text("possible substitutions within 40 bases").first.wait_for()
        browser.close()


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_every_tab_stays_on_the_bar_of_a_narrow_phone(server):
    """At 320 and 360 px (small phones; a wider font tips 400) all five tabs can be seen and opened: none is hidden
    behind a "more" menu that Gradio fills by measuring the buttons."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _chromium(p)
        page = _new_page(browser, 320, 900)
        page.goto(server)
        page.get_by_role("tab", name="Design").wait_for()
        for width in (320, 360):
            page.set_viewport_size({"width": width, "height": 900})
            page.wait_for_timeout(300)  # Gradio lays the bar out again on a resize
            names = ["Design", "Variant", "VCF batch", "Mutation scan", "Models"]
            assert all(page.get_by_role("tab", name=name, exact=True).is_visible() for name in names), width
        page.get_by_role("tab", name="Models", exact=True).click()
        page.get_by_text("Loaded models").first.wait_for()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        browser.close()


#: WCAG contrast of an element's text on the background it is drawn on (the nearest ancestor's that is opaque)
_CONTRAST_JS = """el => {
  const rgb = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = c => { const [r, g, b] = rgb(c).slice(0, 3).map(v => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  let back = el, fill = "rgb(255, 255, 255)";
  while (back) { const c = getComputedStyle(back).backgroundColor; const a = rgb(c);
    if (a.length === 3 || (a.length === 4 && a[3] > 0.9)) { fill = c; break; } back = back.parentElement; }
  const [hi, lo] = [lum(getComputedStyle(el).color), lum(fill)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}"""


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.parametrize("width", [1400, 400])
def test_text_and_buttons_meet_aa_contrast_in_one_font_family_and_genbank_has_the_date(server, width):
    """Helper text (a field's info line), placeholders and the Generate and Stop buttons read at 4.5:1 or more
    on what they are drawn on; the page uses the system's font family, no web font whose bold falls back letter
    by letter; a design's GenBank file carries the day it was made, not 01-JAN-1980."""
    import datetime

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = _chromium(p)
        page = _new_page(browser, width, 1200)
        page.goto(server)
        page.get_by_role("button", name="Generate").wait_for()
        info = page.locator('[data-testid="block-info"]').filter(visible=True)
        measured = {"helper text": info.first.evaluate(_CONTRAST_JS),
                    "Generate": page.get_by_role("button", name="Generate", exact=True).evaluate(_CONTRAST_JS),
                    "Stop": page.get_by_role("button", name="Stop", exact=True).evaluate(_CONTRAST_JS)}
        page.get_by_role("tab", name="Variant").click()
        hint = page.get_by_text("1-based; HGVS c. names").first  # a text box's info line (#BBBBC2: 1.9:1)
        measured["a text box's helper text"] = hint.evaluate(_CONTRAST_JS)
        assert all(ratio >= 4.5 for ratio in measured.values()), measured
        page.get_by_role("tab", name="Design").click()
        family = page.evaluate("getComputedStyle(document.querySelector('.gradio-container')).fontFamily")
        assert family.startswith("ui-sans-serif"), family
        page.wait_for_timeout(500)  # the Design and Variant tabs drawn, their bold and plain text
        webfonts = page.evaluate("[...document.fonts].filter(f => f.status !== 'unloaded').map(f => f.family)")
        assert webfonts == [], webfonts  # no font file is fetched: bold and plain text are one family
        page.get_by_label("Bases to generate (exact)", exact=True).fill("30")
        page.get_by_role("button", name="Generate").click()
        genbank = _downloaded(page, "designs.gb")
        assert datetime.date.today().strftime("%d-%b-%Y").upper() in genbank.splitlines()[0]
        assert page.get_by_text("Downloads (FASTA, GenBank, JSON)").count() >= 1
        browser.close()


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_a_link_that_asks_for_a_long_job_fills_the_form_and_waits_for_a_click(server):
    from urllib.parse import urlencode

    from playwright.sync_api import sync_playwright

    query = urlencode({"genome": "HBB-locus-demo", "variant": f"{HBB['genome_contig']}:1206:A>T", "context": 999})
    with sync_playwright() as p:
        browser = _chromium(p)
        page = _new_page(browser, 1400, 1600)
        page.goto(f"{server}?{query}")
        page.get_by_text("press Score variant to run it").first.wait_for()
        box = page.get_by_placeholder("120:A>G, 57:AT>A, 88:C>CTT in the sequence", exact=False)
        assert box.input_value() == f"{HBB['genome_contig']}:1206:A>T"  # the form is filled
        page.wait_for_timeout(3000)
        assert page.get_by_text("delta = LL(alt)").count() == 0  # and nothing was scored without a click
        browser.close()


MARKUP = ['<img src="http://127.0.0.1:9/evil.png" id="evil">', '<a href="http://127.0.0.1:9/evil" id="evil">Session '
          'expired - sign in</a>', "[sign in](http://127.0.0.1:9/evil)"]


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_markup_a_client_sends_is_shown_as_text_never_made_an_element(server):
    """In a shared link and in every text field: what a client typed is shown, quoted, as text; no image is
    fetched, no link or element is made of it."""
    from urllib.parse import urlencode

    from playwright.sync_api import sync_playwright

    def no_element_made(page) -> None:
        assert page.locator("#evil").count() == 0
        assert page.locator("img[src*='evil'], a[href*='evil']").count() == 0

    with sync_playwright() as p:
        browser = _chromium(p)
        for markup in MARKUP:
            page = _new_page(browser, 1400, 1600)
            fetched = []
            page.on("request", lambda request, fetched=fetched: fetched.append(request.url)
                    if request.url.startswith("http://127.0.0.1:9/") else None)
            page.goto(f"{server}?{urlencode({'genome': 'HBB-locus-demo', 'variant': markup, 'context': 0})}")
            page.get_by_text("is not at genome coordinates").first.wait_for()  # the message quotes it as text
            assert page.get_by_text(markup[:24], exact=False).count() > 0
            no_element_made(page)
            page.get_by_role("tab", name="Variant").click()
            for label in ("Reference sequence (bases, FASTA or GenBank)", "…or the full alternate sequence"):
                page.get_by_label(label, exact=True).fill(markup)
            page.get_by_label("Genome", exact=True).first.fill(markup)
            page.get_by_role("button", name="Score variant").click()
            page.get_by_text("is chosen, so the variant is read from it").first.wait_for()
            no_element_made(page)
            page.get_by_role("tab", name="Design").click()
            page.get_by_label("Per-position mask (IUPAC over the new bases, optional)", exact=True).fill(markup)
            page.get_by_text("⚠️").first.wait_for()
            no_element_made(page)
            assert fetched == []
            page.close()
        browser.close()


def test_a_constrained_design_through_the_api_meets_and_reports_its_constraints(client):
    from Bio.Seq import Seq

    protein = "MSKGEELFTGVV"
    out = client.predict(model="carbon-demo", species="mammal", region="none", prompt="GCCACC", upload=None,
                         mask="", n_bases=300, samples=2, seed=3, protein=protein, avoid="BsaI, BsmBI",
                         max_homopolymer=4, gc="35:65", flank="TAAGGATCC", api_name="/generate")
    result = out[-1]
    assert [str(Seq(s).translate()) for s in result["sequences"]] == [protein, protein]  # the protein sets the length
    assert all(len(r["constraints"]) == 5 and all(c["passes"] for c in r["constraints"]) for r in result["reports"])
    assert sorted(r["rank"] for r in result["reports"]) == [1, 2] and result["reports"][0]["ll_flank"] < 0
    assert "all 5 PASS" in out[2] and "with the downstream flank" in out[2]
    from Bio import SeqIO

    header = open(next(f for f in out[5] if f.endswith("designs.fa"))).readline()
    # short: the settings are in JSON and GenBank; the weights' checksum and the app's version tell runs apart
    assert re.fullmatch(r">design_1 model=carbon-demo seed=3 bases=36 weights=sha256:[0-9a-f]{16} carbon_studio=\S+\n",
                        header)
    assert result["settings"]["constraints"] == {"protein": protein, "codon_table": "1", "avoid": "BsaI,BsmBI",
                                                 "max_homopolymer": "4", "gc": "35:65"}
    entry = next(SeqIO.parse(next(f for f in out[5] if f.endswith("designs.gb")), "genbank"))
    cds = next(f for f in entry.features if f.type == "CDS")
    assert cds.qualifiers["translation"] == [protein] and (int(cds.location.start), int(cds.location.end)) == (6, 42)
    assert any("constraint" in note and "PASS" in note for f in entry.features for note in f.qualifiers.get("note", []))


def test_choosing_a_model_sets_every_scoring_choice_to_that_models_own_method():
    """The Variant, VCF and scan tabs read a model the way its quality was measured: carbon-demo with its
    scoring.json (the chain rule, 1,200-base windows, both strands, every frame, radius 6, no tags), the draft,
    whose scores were never measured, with the Carbon evaluation's setup (the reference marginals, 8 kb, one
    strand, the whole window). Each scoring tab has its own tags; the Design tab's go back to none."""
    from carbon_app.app.gradio_app import build_app

    demo = build_app()
    handler = next(f for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "model_dropdowns")
    scoring = [o for o in handler.outputs if getattr(o, "label", "") == "Scoring"]
    assert len(scoring) == 3 and {o.value for o in scoring} == {"chain"}  # the page opens on carbon-demo
    windows = [o for o in handler.outputs if str(getattr(o, "label", "")).startswith("Window")]
    assert len(windows) == 3 and {o.value for o in windows} == {1200}
    tags = [o for o in handler.outputs if getattr(o, "label", "") in ("Species tag", "Region tag")]
    assert len(tags) == 2 * 4 and {o.value for o in tags} == {"none"}  # three scoring tabs and the Design tab
    for name, method, window, both, radius in (("carbon-demo-draft", "marginal", 8000, False, "whole"),
                                               ("carbon-demo", "chain", 1200, True, "6")):
        own = [update.value for update in handler.fn(name)]
        assert own[:3] == [method] * 3 and own[3:6] == [window] * 3 and own[6:9] == [both] * 3
        assert own[9:12] == [6] * 3 and own[12:15] == [radius] * 3 and own[15:] == ["none"] * 8


def test_a_busy_port_is_named_in_one_sentence_before_the_models_load(tmp_path):
    """Another program on the port: `python app.py` ends at once with one line naming the port and
    GRADIO_SERVER_PORT, not Gradio's traceback after the models have loaded."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        began = time.monotonic()
        done = subprocess.run([sys.executable, "app.py"], cwd=REPO, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port),
                                   "CARBON_MODEL": "", "CARBON_OUTPUT_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"error: port {port} on 127.0.0.1 is in use or not allowed (Address already in "
                                   "use): stop what holds it, or start on another port with GRADIO_SERVER_PORT=7861")
    assert time.monotonic() - began < 60  # before any model loads


#: where the two-width browser test keeps its screenshots (CI keeps the folder as an artifact)
ARTIFACTS = Path(os.environ.get("CARBON_TEST_ARTIFACTS") or REPO / "test-artifacts") / "browser"


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
@pytest.mark.parametrize("width", [1400, 400])
def test_what_a_biologist_meets_at_desktop_and_phone_width(server, server_out, tmp_path, width):
    """At each width: every tab on the bar; the examples sit between the form and the results and fill the form;
    two designs with the default (empty) seed differ and name their seeds; no progress bar covers a design as it
    streams; a long table keeps its header in view as it scrolls; no plot's legend covers its titles; the
    GenBank export has the design's features; a VCF on a contig the genome lacks ends in a message naming it
    and the genome's contigs, with no empty plot; the Models tab opens with its summary; a page never scrolls
    sideways. Screenshots kept in ARTIFACTS."""
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    vcf = tmp_path / "brca1_1000g.vcf"
    vcf.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
                   "17\t41245466\trs1\tG\tA\t.\t.\t.\n17\t41246000\trs2\tC\tT\t.\t.\t.\n")
    batch, bases = tmp_path / "hbb_40.vcf", hbb_sequence()  # 40 SNVs along the demo genome, ten windows apart
    batch.write_text("##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n" + "".join(
        f"{HBB['genome_contig']}\t{pos}\t.\t{bases[pos - 1]}\t{'C' if bases[pos - 1] != 'C' else 'T'}\t.\t.\t.\n"
        for pos in range(30, 2990, 74)))
    with sync_playwright() as p:
        browser = _chromium(p)
        page = _new_page(browser, width, 1000)
        page.goto(server)
        with _evidence_on_failure(page, tmp_path, server_out):
            page.get_by_role("tab", name="Models").wait_for()  # the page has loaded
            for name in ("Design", "Variant", "VCF batch", "Mutation scan", "Models"):
                assert page.get_by_role("tab", name=name).is_visible()  # none behind a "more" menu
            assert page.get_by_label("Seed (empty: random, reported with the design)").input_value() == ""
            # a dropdown that Tab leaves closes its list: none stays open over the fields and tabs after it
            page.get_by_label("Species tag").first.click()
            expect(page.get_by_role("listbox")).to_have_count(1)
            for _ in range(3):  # through the region tag and the mode (each opens while it has the focus)
                page.keyboard.press("Tab")
            expect(page.get_by_role("listbox")).to_have_count(0)

            example = page.get_by_role("button", name="Fungus, 120 bases ending in two stops (mask)")
            assert (_box(page.get_by_role("button", name="Generate"))["y"] < _box(example)["y"]
                    < _box(page.get_by_text("Designs as FASTA (to copy)"))["y"])  # below the form, above results
            example.click()
            bases, mask = page.get_by_label("Bases to generate (exact)", exact=True), page.get_by_label(
                "Per-position mask (IUPAC over the new bases, optional)")
            expect(bases).to_have_value("120")
            assert mask.input_value() == "N" * 114 + "TAATAA"
            mask.fill("")
            bases.fill("60")
            page.get_by_label(f"Samples (1-{MAX_SAMPLES})", exact=True).fill("1")
            designs, seeds = [], []
            for _ in range(2):
                _press_for_a_new_result(page, page.get_by_role("button", name="Generate"), "bases/s")
                made = page.get_by_text("Made with model").first.inner_text()
                seeds.append(made.split("seed ")[1].split(";")[0])
                designs.append("".join(ch for ch in page.locator(".carbon-seq").first.inner_text() if ch in "ACGT"))
            assert seeds[0] != seeds[1] and designs[0] != designs[1] and len(designs[0]) == 60

            bases.fill("300")
            page.get_by_label(f"Samples (1-{MAX_SAMPLES})", exact=True).fill("16")
            _watch_progress(page, ".carbon-seq", ".carbon-seq")
            _press_for_a_new_result(page, page.get_by_role("button", name="Generate"), "bases/s")
            shown, covered = _progress_seen(page)
            assert shown and not covered, (shown, covered)  # no bar over a design as it streams
            assert _header_stays_in_view(page, "design") == pytest.approx(0, abs=2)  # the 16 designs' checks
            # what a person ranks designs by is on screen whole, and each row's name stays as the rest scrolls by
            inside, moved = _key_columns_in_view(page, "design", "log-lik (rank)")
            assert inside and moved == pytest.approx(0, abs=2), (inside, moved)
            assert _plots_without_collisions(page, 2) == 2  # confidence and logo
            genbank = _downloaded(page, "designs.gb")
            from Bio import SeqIO

            records = list(SeqIO.parse(io.StringIO(genbank), "genbank"))
            assert len(records) == 16 and all(len(r.seq) == 300 for r in records)
            for record in records:  # the checks' log-likelihood on the source, the designed bases as a feature (a
                # random design may also hold an open reading frame, a CDS feature of its own)
                source = record.features[0]
                designed = [f for f in record.features if f.qualifiers.get("note") == ["designed bases"]]
                assert source.type == "source" and "log-likelihood under carbon-demo" in source.qualifiers["note"][0]
                assert len(designed) == 1 and len(designed[0].location) == 300
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
            page.screenshot(path=str(ARTIFACTS / f"design-{width}.png"), full_page=True)

            page.get_by_role("tab", name="Variant").click()
            page.get_by_role("button", name="sickle cell (HbS): HBB c.20A>T").first.click()
            expect(page.get_by_placeholder("120:A>G, 57:AT>A, 88:C>CTT in the sequence", exact=False)).to_have_value(
                HBB["variants"][0]["variant"])
            page.get_by_label("Context (bases either side, 0 = off)", exact=True).first.fill("10")
            # the ranking's bar (it follows the verdict and its link line) has a line of its own, over neither
            _watch_progress(page, ".carbon-share, .carbon-progress ~ div, h1, h2, h3, p", ".carbon-share")
            page.get_by_role("button", name="Score variant").click()
            page.get_by_text("possible substitutions within 10 bases").first.wait_for()
            shown, covered = _progress_seen(page)
            assert shown and not covered, (shown, covered)
            page.get_by_role("columnheader", name="ref position").first.wait_for()
            assert _header_stays_in_view(page, "ref position") == pytest.approx(0, abs=2)  # Gradio's own table
            assert _plots_without_collisions(page, 2) == 2  # the tracks and the site's bars
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
            page.screenshot(path=str(ARTIFACTS / f"variant-{width}.png"), full_page=True)

            page.get_by_role("tab", name="VCF batch").click()
            page.get_by_label("Window (bases)", exact=True).first.fill("300")
            page.locator("input[type=file]").nth(_vcf_upload_index(page)).set_input_files(str(batch))
            page.get_by_role("button", name="Score VCF").click()
            # records done of all, with an estimate of what is left, as they are scored
            estimate = re.compile(r"of 40 ALT alleles \(\d+%\) in \d+ s, (about \d+ s|under a second) left")
            page.get_by_text(estimate).first.wait_for()
            page.get_by_text("40 records, 40 ALT alleles: 40 scored").first.wait_for()
            assert _plots_without_collisions(page, 1) == 1
            delta = _box(page.get_by_role("columnheader", name="delta").first)  # each variant's delta on screen
            assert delta["x"] + delta["width"] <= width, delta
            page.locator(".block", has=page.get_by_text("VCF (.vcf or bgzipped .vcf.gz)", exact=True)).last \
                .get_by_role("button", name="Clear").click()  # the upload's field again, for the next VCF
            page.locator("input[type=file]").nth(_vcf_upload_index(page)).set_input_files(str(vcf))
            page.get_by_role("button", name="Score VCF").click()
            page.get_by_text("has no contig 17 (2 ALT alleles); its contigs are HUMHBB_61001-64000").first.wait_for()
            assert _plots_without_collisions(page) == 0  # nothing scored: no empty plot that looks like a result
            page.screenshot(path=str(ARTIFACTS / f"vcf-{width}.png"), full_page=True)
            page.get_by_role("tab", name="Models").click()
            page.get_by_text("is a small demonstration model").first.wait_for()
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
            page.screenshot(path=str(ARTIFACTS / f"models-{width}.png"), full_page=True)
        browser.close()


def _box(locator) -> dict:
    return locator.first.bounding_box()


def _press_for_a_new_result(page, button, done: str) -> None:
    """Press `button` and wait for the new result, not the last one: `done` (a text of the result) gone from the
    page once (the last result cleared: watched at every change of the page, so a clear that a fast run follows
    within milliseconds is seen) and then shown again."""
    page.evaluate("""(done) => {
      window.carbonClearWatch?.disconnect();
      window.carbonCleared = false;
      window.carbonClearWatch = new MutationObserver(() => {
        if (!document.body.innerText.includes(done)) {
          window.carbonCleared = true;
          window.carbonClearWatch.disconnect();
        }
      });
      window.carbonClearWatch.observe(document.body, {subtree: true, childList: true, characterData: true});
    }""", done)
    button.click()
    page.wait_for_function("() => window.carbonCleared")
    page.get_by_text(done).first.wait_for()


def _watch_progress(page, content: str, result: str) -> None:
    """From now until `_progress_seen`: at every change of the page (a MutationObserver, so a run of half a
    second is watched as closely as a long one), whether a progress bar (Gradio's loading status: its
    `.wrap.default` unless hidden) was shown beside shown `content` (a CSS selector), and whether one covered
    it; counted while `result` (a selector) is shown, once the last run's result has been cleared."""
    page.evaluate("""([content, result]) => {
      // shown: on screen with a size (a folded <details>' text keeps its box, hidden: checkVisibility says so)
      const seen = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0
                                                                     && e.checkVisibility(); };
      const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
      const boxes = s => [...document.querySelectorAll(s)].filter(seen).map(e => e.getBoundingClientRect());
      const seenSoFar = window.carbonProgress = {shown: 0, covered: 0, cleared: false};
      window.carbonProgressWatch?.disconnect();
      window.carbonProgressWatch = new MutationObserver(() => {
        const shownNow = boxes(result).length > 0;
        seenSoFar.cleared ||= !shownNow;
        if (!seenSoFar.cleared || !shownNow) return;
        const held = boxes(content), bars = boxes('.wrap.default:not(.hide), .progress-text, .eta-bar');
        seenSoFar.shown += held.length > 0 && bars.length > 0;
        seenSoFar.covered += bars.some(b => held.some(h => meet(b, h)));
      });
      window.carbonProgressWatch.observe(document.body, {subtree: true, childList: true, attributes: true,
                                                         characterData: true});
    }""", [content, result])


def _progress_seen(page) -> tuple[int, int]:
    """What `_watch_progress` saw: (changes with a bar beside the content, changes with one over it)."""
    return tuple(page.evaluate("""() => { window.carbonProgressWatch.disconnect();
                                         return [window.carbonProgress.shown, window.carbonProgress.covered]; }"""))


def _header_stays_in_view(page, header: str) -> float:
    """Scrolls the box of the table whose header cell reads `header` down by 150 px and gives the header's
    distance from the box's top (0: it stayed in view); the box must have scrolled."""
    moved, distance = page.evaluate("""(header) => {
      const th = [...document.querySelectorAll('th')].find(e => e.innerText.trim() === header && e.offsetParent);
      let box = th;
      while (box && !(['auto', 'scroll'].includes(getComputedStyle(box).overflowY)
                      && box.scrollHeight > box.clientHeight)) box = box.parentElement;
      if (!box) return [0, null];
      box.scrollTop = 150;
      return [box.scrollTop, th.getBoundingClientRect().top - box.getBoundingClientRect().top];
    }""", header)
    assert moved > 0, f"the table under {header!r} does not scroll in its own box"
    return distance


def _key_columns_in_view(page, first: str, key: str) -> tuple[bool, float]:
    """(whether the header cell `key` lies wholly inside its table's box as the page opens it, how far the
    first column's header `first` moves when the box scrolls sideways to its end: 0 = it stays in view)."""
    return tuple(page.evaluate("""([first, key]) => {
      const cell = name => [...document.querySelectorAll('th')].find(e => e.innerText.trim() === name
                                                                      && e.offsetParent);
      const th = cell(key), name = cell(first);
      let box = th;
      while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) box = box.parentElement;
      const inside = th.getBoundingClientRect().right <= box.getBoundingClientRect().right + 1;
      const before = name.getBoundingClientRect().left;
      box.scrollLeft = box.scrollWidth;
      const moved = name.getBoundingClientRect().left - before;
      box.scrollLeft = 0;
      return [inside, moved];
    }""", [first, key]))


def _plots_without_collisions(page, drawn: int = 0) -> int:
    """The visible plots (plotly) whose legend meets none of their titles, after checking every one does not;
    counted once `drawn` of them are on the page (a slow machine draws the second a moment after the first),
    or after 10 s."""
    from playwright.sync_api import TimeoutError as NotDrawn

    visible = "[...document.querySelectorAll('.js-plotly-plot')].filter(p => p.offsetParent).length"
    try:
        page.wait_for_function(f"() => {visible} >= {drawn}", timeout=10_000)
    except NotDrawn:  # counted as they are: the caller's assertion names how many
        pass
    found = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.offsetParent)
      .map(p => {
        const box = s => [...p.querySelectorAll(s)].map(e => e.getBoundingClientRect()).filter(r => r.width > 0);
        const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
        const legends = box('.legend'), titles = box('.gtitle, .xtitle, .ytitle, .g-xtitle text, .g-ytitle text');
        return legends.some(l => titles.some(t => meet(l, t)));
      })""")
    assert not any(found), f"a legend covers a title in {found.count(True)} of {len(found)} plots"
    return len(found)


def _downloaded(page, name: str) -> str:
    """The text of the file `name` that a Downloads list offers, fetched as the browser would."""
    link = page.locator(f"a[href*='{name}']").first
    link.wait_for()
    return page.request.get(link.get_attribute("href")).text()


def _vcf_upload_index(page) -> int:
    """The VCF tab's VCF file input among the page's file inputs (the first visible one on that tab)."""
    inputs = page.locator("input[type=file]")
    return next(i for i in range(inputs.count())
                if inputs.nth(i).evaluate("e => e.accept && e.accept.includes('.vcf')"))
