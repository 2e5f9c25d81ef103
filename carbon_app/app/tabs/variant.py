"""Variant: one variant in a pasted sequence or at a genome's coordinates, with its consequence, its
context and a link that opens the page on it."""

from __future__ import annotations

import gradio as gr

from ...errors import CarbonError, InputError
from ...inference.spec import radius_text, substitutions_within
from .. import formatting as fmt
from ..plots import site_figure, variant_figure
from ..progress import told_in_parts
from ..service import DEMO_GENOME, NO_GENOME, Service
from .common import FREE, Page, fail, scoring_extras, sequence_inputs

CONTEXT_BASES = 25  # the tab ranks a delta among the 150 or so substitutions this close, unless told not to
LINK_CONTEXT_BASES = CONTEXT_BASES  # the widest context a shared link runs on opening, without a click
HGVS_EXAMPLE = "c.92+1G>A"  # HBB IVS-I-1, written on the coding sequence


def variant_tab(page: Page, tabs: gr.Tabs, demo: gr.Blocks) -> None:
    service, examples = page.service, page.examples
    with gr.Row():
        with gr.Column(scale=3):
            genome = gr.Dropdown([("none: the variant is in the sequence below", NO_GENOME), *page.genomes],
                                 value=NO_GENOME, label="Genome", **FREE,
                                 info="choose one to give the variant at its coordinates")
            reference, upload = sequence_inputs("Reference sequence (bases, FASTA or GenBank)")
        with gr.Column(scale=2):
            change = gr.Textbox(label="Variant", placeholder="120:A>G, 57:AT>A, 88:C>CTT in the sequence (or HGVS: "
                                "c.20A>T, g.120A>G); chr11:5227002:T>A with a genome",
                                info="1-based; HGVS c. names count on the coding sequence below; at coordinates "
                                     "also chr11-5227002-T-A, 11:g.5227002T>A, 11:c.20A>T or a VCF line")
            alternate = gr.Textbox(label="…or the full alternate sequence", lines=2)
            window = page.window_number("Window (bases, centred on the variant)")
            strand = page.strand_checkbox()
            method = page.scoring_dropdown()
            more = page.more_setup()
            cds = gr.Textbox(label="Coding sequence (optional)", placeholder="1187..1278,1409..1631,…",
                             info="a start, exons or complement(…): names the consequence; a GenBank upload's CDS "
                                  "is used when empty")
            context = gr.Number(label="Context (bases either side, 0 = off)", value=CONTEXT_BASES,
                                info="ranks the delta among every substitution that close")
            button = gr.Button("Score variant", variant="primary")
    # the examples, under the fields they fill, leave the scoring fields as they are: the model's own setup, what
    # its quality was measured with; the last is named in HGVS, counted on the CDS: IVS-I-1, intron 1's donor site
    named = [*(v["variant"] for v in examples["variants"]), HGVS_EXAMPLE]
    labels = [f"{v['name']}: {v['hgvs'].split(' (')[0]}" for v in examples["variants"]] + [
        f"IVS-I-1, beta-zero thalassaemia: HBB {HGVS_EXAMPLE}"]
    gr.Examples([[page.hbb, v, "", NO_GENOME, examples["hbb_cds"]] for v in named],
                inputs=[reference, change, alternate, genome, cds], example_labels=labels,
                label="Worked example: human beta-globin (HBB), in its sequence")
    if DEMO_GENOME in page.genomes:
        at = [f"{examples['genome_contig']}:{v}" for v in named]
        gr.Examples([["", v, "", DEMO_GENOME, examples["hbb_cds"]] for v in at],
                    inputs=[reference, change, alternate, genome, cds],
                    example_labels=[f"{label.split(':')[0].split(',')[0]} at {v}"  # under 50 letters
                                    for label, v in zip(labels, at, strict=True)],
                    label=f"The same at coordinates on the bundled {DEMO_GENOME} genome")
    verdict = gr.Markdown(fmt.RESEARCH_NOTE)
    # a line of its own for the progress bar, under the verdict: the delta, shown first, stays readable while
    # the substitutions around it are ranked, and the bar covers no link or text (it is no output: empty)
    working = gr.Markdown(elem_classes="carbon-progress")
    share = gr.Markdown(elem_classes="carbon-share")
    around = gr.HTML(label="The variant in its sequence")
    tracks = gr.Plot(label="Per-base tracks")
    site = gr.Plot(label="Base probabilities at the site")
    track_table = gr.Dataframe(headers=["ref position", "ref log-prob", "alt log-prob", "delta"],
                               label="Aligned tracks", max_height=300)
    files = gr.File(label="Downloads (TSV, JSON)", file_count="multiple")
    with gr.Accordion("Raw result (JSON)", open=False):
        raw = gr.JSON()

    def score_one(model, species, region, reference, upload, change, alternate, window, strand, method, genome,
                  cds, context, request, progress, frames=None, delta_radius=None):
        """A variant in a pasted sequence or at a genome's coordinates: the verdict, plots, table, files and a
        link as soon as the delta is known, then the verdict again with the delta's context."""
        options = dict(window=window, strand_average=bool(strand), species=species, region=region, method=method,
                       **scoring_extras(frames, delta_radius))

        # the other substitutions a context of `context` bases either side ranks the delta among
        ranked = substitutions_within(int(context)) - 1 if isinstance(context, (int, float)) and context > 0 else 0
        ranking = told_in_parts(lambda share, line: progress(share, desc=line), ranked, "nearby substitutions",
                                "ranking")

        def verdict_text(report, genomic, context_note: str) -> str:
            return "\n\n".join([fmt.variant_markdown(report, genomic, context_note),
                                 fmt.score_provenance(report.score),
                                 fmt.trust_note(service.model(model), report.score.spec,
                                                fmt.variant_group(species, genome)), fmt.RESEARCH_NOTE])

        # what the context does not change is drawn once, and sent with every stage (an API client reads the
        # last one whole)
        drawn, report, genomic = {}, None, None
        try:
            if genome and genome != NO_GENOME:
                if (reference or "").strip() or upload or (alternate or "").strip():
                    raise InputError(f"the genome {genome} is chosen, so the variant is read from it: clear the "
                                     "pasted sequence (or choose the genome 'none' to score within it)")
                stages = service.score_at_stages(model, genome, change, cds, context, ranking, **options)
                here = fmt.page_url(dict(request.headers) if request else {})
                link = None  # made from the setup as used, once the score says what it was
            else:
                record = Service.record(reference, upload, "reference sequence")
                stages = ((None, report) for report in service.score_stages(
                    model, record.sequence, change, alternate, cds, record.coding, context, ranking, **options))
                link = "*A link to a result needs a genome (a pasted sequence is too long for a link).*"
            for genomic, report in stages:
                if link is None:  # every setting that changes the number, as used: the link reproduces it
                    link = fmt.share_link(here, genome=genome, variant=(change or "").strip(), model=model, cds=cds,
                                          context=context, **link_setup(report.score.spec))
                data = report.to_dict()
                if genomic:  # the contig's positions, over the cut window's own
                    data = {**data, **genomic.to_dict()}
                shown = genomic.placed if genomic else report.score  # positions on the contig when there is one
                drawn = drawn or {tracks: variant_figure(shown), site: site_figure(shown),
                                  track_table: fmt.track_rows(shown), share: link, around: fmt.variant_blocks(shown)}
                yield {**drawn, verdict: verdict_text(report, genomic, fmt.ranking_pending(context) if context else ""),
                       files: service.variant_files(shown, data), raw: data}
        except CarbonError as exc:
            if report is not None:  # the delta is on the page and stays there; the context line says why it stopped
                yield {verdict: verdict_text(report, genomic, f"not ranked: {fmt.plain(exc)}")}
            fail(exc)

    @page.runs_model
    def variant(model, species, region, reference, upload, change, alternate, window, strand, method,
                genome=NO_GENOME, cds=None, context=CONTEXT_BASES, request: gr.Request = None,
                progress=gr.Progress(), **named):  # noqa: B008
        # frames and the delta's radius come by name: API clients written before them still work
        yield from score_one(model, species, region, reference, upload, change, alternate, window, strand, method,
                             genome, cds, context, request, progress, **named)

    def from_link(request: gr.Request):
        """The tab's inputs from the page's URL (?genome=…&variant=…): a shared link opens on them."""
        query = dict(request.query_params) if request else {}
        if not query.get("variant"):
            return {run_from_link: False}
        chosen = query.get("model")

        def number(key: str, default: int):  # as typed in the link; the engine names a wrong one
            text = query.get(key, "")
            try:
                return float(text) if text else default
            except ValueError:
                return text

        asked_context = number("context", 0)
        # a link runs on opening only what fits a small budget: one that asks for more (a wide context ranks
        # thousands of substitutions) fills the form and waits for a click, so no link queues a long job for
        # every visitor
        runs = isinstance(asked_context, (int, float)) and 0 <= asked_context <= LINK_CONTEXT_BASES
        fields = {tabs: gr.Tabs(selected="variant"), genome: query.get("genome", NO_GENOME),
                  change: query["variant"], cds: query.get("cds", ""), context: asked_context,
                  reference: "", run_from_link: runs}
        if not runs:
            fields[verdict] = (f"*This link asks for a context of {fmt.plain(asked_context)} bases, more than a link "
                               f"runs by itself ({LINK_CONTEXT_BASES}): press **Score variant** to run it.*")
        # a setting the link leaves out stays the model's own; one it names is shown as it is written (the
        # engine names a wrong one)
        if "window" in query:
            fields[window] = number("window", None)
        if "strand" in query:
            fields[strand] = query["strand"] == "1"
        if "frames" in query:
            fields[more["frames"]] = number("frames", None)
        for key, box in (("method", method), ("species", more["species"]), ("region", more["region"]),
                         ("radius", more["delta_radius"])):
            if key in query:
                fields[box] = query[key]
        return {**fields, page.model: chosen} if chosen in page.models else fields

    @page.runs_model
    def variant_from_link(run, model, species, region, reference, upload, change, alternate, window, strand, method,
                          genome, cds, context, frames, delta_radius, request: gr.Request,
                          progress=gr.Progress()):  # noqa: B008
        if not run:
            # a plain visit: nothing to score and nothing shown changes ({} alone would be read as one JSON
            # value for the eight outputs, and raise in the app on every page load)
            yield {verdict: gr.skip()}
            return
        yield from score_one(model, species, region, reference, upload, change, alternate, window, strand, method,
                             genome, cds, context, request, progress, frames, delta_radius)

    inputs = [page.model, more["species"], more["region"], reference, upload, change, alternate, window, strand,
              method, genome, cds, context]
    by_name = {"frames": more["frames"], "delta_radius": more["delta_radius"]}
    outputs = [verdict, tracks, site, track_table, files, share, around, raw]
    page.run_on_click(button, variant, inputs, outputs, "score_variant", progress_on=working, by_name=by_name)
    # a shared link (?genome=…&variant=…) opens this tab on its inputs and scores them
    run_from_link = gr.State(False)
    demo.load(from_link, None, [tabs, page.model, genome, change, window, strand, method, *more.values(), cds,
                                context, reference, run_from_link, verdict], api_visibility="private",
              queue=False).then(
        variant_from_link, [run_from_link, *inputs, *by_name.values()], outputs, api_visibility="private",
        show_progress_on=working, **page.model_queue)


def link_setup(spec) -> dict:
    """Every setting of a score's setup that changes its number, as a link carries it (read back by
    `from_link`): the link reproduces the score even if the model's own setup later changes."""
    return {"window": spec.window, "strand": int(spec.strand_average), "method": spec.method,
            "frames": spec.frames, "radius": radius_text(spec.delta_radius), "species": spec.species or "none",
            "region": spec.region or "none"}
