"""Mutation scan: every substitution of a region, with consequences where a coding sequence is known."""

from __future__ import annotations

import gradio as gr

from .. import formatting as fmt
from ..plots import consequence_figure, scan_figure
from ..progress import told_in_parts
from ..service import Service
from .common import Page, scoring_extras, sequence_inputs


def scan_tab(page: Page) -> None:
    service, examples = page.service, page.examples
    with gr.Row():
        with gr.Column(scale=3):
            sequence, upload = sequence_inputs("Sequence (bases, FASTA or GenBank)")
        with gr.Column(scale=2):
            with gr.Row():
                start = gr.Number(label="Region start (1-based)", value=1)
                end = gr.Number(label="Region end", value=60)
            window = page.window_number("Window (bases)")
            strand = page.strand_checkbox()
            method = page.scoring_dropdown()
            more = page.more_setup()
            cds = gr.Textbox(label="Coding sequence (optional)", placeholder="1187..1278,…",
                             info="names each substitution's consequence")
            button = gr.Button("Scan every substitution", variant="primary")
    region_start, region_end = examples["scan_region"]
    gr.Examples([[page.hbb, region_start, region_end, examples["hbb_cds"]]],
                inputs=[sequence, start, end, cds], example_labels=["The first 30 codons of human beta-globin (HBB)"],
                label="Example")
    heatmap = gr.Plot(label="delta log-likelihood of every substitution", elem_classes="carbon-wide-plot")
    block = gr.HTML(label="The region")
    # shown when a coding sequence names them
    by_class = gr.Plot(label="By consequence", visible=False, elem_classes="carbon-wide-plot")
    summary = gr.Markdown(elem_classes="carbon-table")
    download = gr.File(label="Download (TSV)")
    with gr.Accordion("Raw result (JSON)", open=False):
        raw = gr.JSON()

    @page.runs_model
    def scan(model, species, region, sequence, upload, start, end, window, method, cds=None, strand=None,
             progress=gr.Progress(), **named):  # noqa: B008
        # frames and the delta's radius come by name: API clients written before them still work
        record = Service.record(sequence, upload, "sequence")
        # done and left in the substitutions' own count, as the VCF tab says its ALT alleles
        positions = int(end) - int(start) + 1 if all(isinstance(v, (int, float)) for v in (start, end)) else 0
        scoring = told_in_parts(lambda share, line: progress(share, desc=line), 3 * max(positions, 0),
                                "substitutions", "scanning")
        scoring(0)
        result, consequences = service.scan(
            model, record.sequence, start, end, cds, record.coding, window=window, species=species,
            region=region, method=method, strand_average=None if strand is None else bool(strand),
            **scoring_extras(**named), progress=scoring)
        rows = [[*row, str(c)] for row, c in zip(result.rows(), consequences, strict=True)] if consequences \
            else result.rows()
        text = "\n\n".join([fmt.scan_summary(result, consequences), fmt.scan_provenance(result),
                             fmt.trust_note(service.model(model), result.spec, fmt.variant_group(species)),
                             fmt.RESEARCH_NOTE])
        by_consequence = consequence_figure(result, consequences) if consequences else None
        return {heatmap: scan_figure(result), by_class: gr.Plot(by_consequence, visible=by_consequence is not None),
                block: fmt.sequence_block(result.region, result.start, title="the region scanned"),
                summary: text, download: service.scan_file(result, consequences), raw: {"rows": rows}}

    page.run_on_click(button, scan, [page.model, more["species"], more["region"], sequence, upload, start, end,
                                     window, method, cds, strand],
                      [heatmap, by_class, block, summary, download, raw], "scan",
                      by_name={"frames": more["frames"], "delta_radius": more["delta_radius"]})
