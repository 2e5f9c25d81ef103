"""VCF batch: an uploaded VCF scored against one of the server's genomes, every record back annotated."""

from __future__ import annotations

import time

import gradio as gr

from ...assets import ASSETS
from .. import formatting as fmt
from ..plots import vcf_figure
from ..progress import progress_line
from ..service import DEMO_GENOME
from .common import FREE, Page, scoring_extras


def vcf_tab(page: Page) -> None:
    service = page.service
    genomes = page.genomes
    gr.Markdown("Score every ALT allele of a VCF against one of this server's genomes. Every record comes back, in "
                "order, with INFO `CARBON_DELTA` or the reason it has none (`CARBON_PROBLEM`). Up to "
                f"{service.config.max_vcf_alts:,} ALT alleles here; the command line (`score-vcf`) has no limit.")
    with gr.Row():
        with gr.Column(scale=3):
            genome = gr.Dropdown(genomes, value=genomes[0] if genomes else None, label="Genome", **FREE,
                                 info="this server's genomes (CARBON_REFERENCES); or bring one below")
            upload = gr.File(label="VCF (.vcf or bgzipped .vcf.gz)", file_types=[".vcf", ".gz"], height=130)
            with gr.Accordion("Your own genome, contig names", open=False):
                genome_file = gr.File(label="A genome FASTA (.fa, .fasta, .fna, gzipped or not; up to 5 MB, "
                                            "64 MB unpacked): used instead of the genome above",
                                      file_types=[".fa", ".fasta", ".fna", ".gz"], height=110)
                renaming = gr.Textbox(label="Contig names: the VCF's name and the genome's, one pair a line "
                                            "(chr17 and 17 match without one)", lines=2, placeholder="17 ref_brca1")
        with gr.Column(scale=2):
            window = page.window_number("Window (bases)")
            strand = page.strand_checkbox()
            method = page.scoring_dropdown()
            more = page.more_setup()
            context = gr.Number(label="Context (bases either side, 0 = off)", value=0,
                                info="adds CARBON_CONTEXT: the share of nearby substitutions each ALT is more "
                                     "damaging than")
            button = gr.Button("Score VCF", variant="primary")
    if DEMO_GENOME in genomes:
        gr.Examples([[DEMO_GENOME, str(ASSETS / "examples" / page.examples["vcf"])]], inputs=[genome, upload],
                    label="Example", example_labels=["HBB: HbS, HbC, HbE, thalassaemias, one wrong REF"])
    summary = gr.Markdown()
    plot = gr.Plot(label="Deltas along the genome")
    table = gr.Dataframe(headers=fmt.VCF_TABLE_COLUMNS, label="Every ALT allele (click a column to sort)",
                         max_height=400, elem_classes="carbon-table", pinned_columns=1)
    files = gr.File(label="Downloads (annotated VCF, its tabix index, TSV)", file_count="multiple")

    @page.runs_model
    def score(model, species, region, genome, upload, window, strand, method, context,
              progress=gr.Progress(), **named):  # noqa: B008
        # the genome file and the renaming come by name: API clients written before them still work
        began = time.monotonic()

        def tell(done: int, total: int) -> None:
            progress(done / max(total, 1), desc=progress_line(done, total, "ALT alleles", time.monotonic() - began))

        result, paths, rows = service.score_vcf(model, genome, upload, progress=tell, window=window,
                                                strand_average=bool(strand), species=species, region=region,
                                                method=method, context=context,
                                                genome_upload=named.get("genome_file"),
                                                renaming=named.get("renaming"),
                                                **scoring_extras(named.get("frames"), named.get("delta_radius")))
        made = (f"*Scored with model **{model}** on **{fmt.plain(result.genome)}**. {result.spec.sentence()}"
                + (f" Context ±{context}." if context else "") + f" {fmt.setup_line(result.provenance)}"
                + " (Also in the VCF's header.)*")
        text = "\n\n".join([fmt.vcf_markdown(result), made,
                              fmt.trust_note(service.model(model), result.spec, fmt.variant_group(species, genome)),
                              fmt.RESEARCH_NOTE])
        figure = vcf_figure(rows)  # none when nothing was scored: the summary says why
        return {summary: text, plot: gr.Plot(figure, visible=figure is not None), table: fmt.vcf_rows(rows),
                files: paths}

    page.run_on_click(button, score, [page.model, more["species"], more["region"], genome, upload, window, strand,
                                      method, context],
                      [summary, plot, table, files], "score_vcf",
                      by_name={"genome_file": genome_file, "renaming": renaming, "frames": more["frames"],
                               "delta_radius": more["delta_radius"]})
