"""Design: conditional generation with an exact length, a mask and constraints, streamed into the page."""

from __future__ import annotations

import gradio as gr

from ...core.dna import mask_from_template
from ...core.validate import whole_number
from ...errors import CarbonError, ModelError
from ...inference.request import MAX_SAMPLES
from .. import formatting as fmt
from ..plots import confidence_figure, logo_figure
from ..service import Service
from .common import FREE, Page, fail, on_gpu, run_on_click, sequence_inputs

#: the first 60 residues of Aequorea victoria GFP (UniProt P42212), for the constrained-design example
GFP_FRAGMENT = "MSKGEELFTGVVPILVELDGDVNGHKFSVSGEGEGDATYGKLTLKFICTTGKLPVPWPTL"


def mask_check(mask, n_bases) -> str:
    """The mask's length against the bases asked for, as it is typed."""
    if not mask or not mask.strip():
        return "No mask: every position may be any base."
    try:
        length = len(mask_from_template(mask))
        asked = whole_number(n_bases, "the number of bases", 0) if n_bases not in (None, "") else None
    except CarbonError as exc:
        return f"⚠️ {fmt.plain(exc)}"
    if asked and length != asked:
        return f"⚠️ the mask has {length:,} positions but {asked:,} bases are asked for"
    return f"✓ mask of {length:,} positions"


def design_tab(page: Page) -> None:
    service = page.service
    with gr.Row():
        with gr.Column(scale=3):
            prompt, upload = sequence_inputs("DNA prompt (bases or FASTA; may be empty)", lines=3)
            with gr.Row():
                n_bases = gr.Number(label="Bases to generate (exact)", value=300)
                samples = gr.Number(label=f"Samples (1-{MAX_SAMPLES})", value=2)
                seed = gr.Number(label="Seed (empty: random)", value=0)
            mask = gr.Textbox(label="Per-position mask (IUPAC over the new bases, optional)",
                              placeholder="e.g. NNNNNNNNNTAA or RYRYRY…")
            mask_status = gr.Markdown("No mask: every position may be any base.")
        with gr.Column(scale=2):
            mode = gr.Dropdown([("base level (FNS)", "bp"), ("6-mer token", "token")], value="bp", label="Mode",
                               **FREE)
            # plain number fields, no widget limits: the engine checks each value and names the field
            # (a widget's own limit would answer "Value 5 is greater than maximum value 2.")
            temperature = gr.Number(label="Temperature (0 = greedy, up to 10)", value=0.9, step=0.05,
                                    info="≈0.9 for long designs: low temperatures fall into repeats")
            top_k = gr.Number(label="Top-k 6-mers (0 = off)", value=0)
            top_p = gr.Number(label="Top-p (1 = off)", value=1.0, step=0.05)
            speculative = gr.Checkbox(label="Speculative decoding (paired draft model)", value=False)
            with gr.Row():
                run = gr.Button("Generate", variant="primary")
                stop = gr.Button("Stop", variant="stop")
    with gr.Accordion("Design constraints (enforced while sampling)", open=False):
        with gr.Row():
            protein = gr.Textbox(label="Protein to encode (one-letter code; sets the length)", scale=3,
                                 placeholder="MSKGEELFTGVVPILVELDGDVNGHKF…")
            codon_table = gr.Number(label="Codon table (NCBI id)", value=1, scale=1)
            avoid = gr.Textbox(label="Avoid sites (enzymes or IUPAC motifs)", scale=2,
                               placeholder="BsaI, BsmBI, EcoRI, GCNNGC")
        with gr.Row():
            max_homopolymer = gr.Number(label="Longest homopolymer (0 = any)", value=0)
            gc = gr.Textbox(label="GC range, % (MIN:MAX)", placeholder="40:60")
            gc_window = gr.Number(label="…in every window of (bases; 0 = whole design)", value=0)
            flank = gr.Textbox(label="Downstream flank (ranks designs with it)",
                               placeholder="bases that follow the insert")
    sequences_html = gr.HTML(label="Designs")
    status = gr.Markdown()
    with gr.Accordion("Designs as FASTA (to copy)", open=False):
        fasta_copy = gr.Code(label="FASTA", language=None, buttons=["copy", "download"], interactive=False)
    confidence = gr.Plot(label="Per-base confidence")
    logo = gr.Plot(label="Sequence logo of design 1 (the distribution each base was drawn from)")
    checks = gr.Markdown(elem_classes="carbon-table")
    with gr.Accordion("Exact prompt sent (text and token ids)", open=False):
        prompt_info = gr.Code(label="prompt", language=None)
    files = gr.File(label="Downloads (FASTA, JSON)", file_count="multiple")
    with gr.Accordion("Raw result (JSON)", open=False):
        design_json = gr.JSON()
    gr.Examples(
        [["ATGGCTTCAGATCTCGAAGCTTCAGCTCCA", 240, "", 0.9, "mammal", "protein_coding", "", "", 0, ""],
         ["", 120, "N" * 114 + "TAATAA", 0.9, "fungus", "none", "", "", 0, ""],
         ["TATAAAAGGCGCGCCACC", 90, "ATG" + "N" * 84 + "TGA", 0.7, "plant", "none", "", "", 0, ""],
         ["GCCACC", None, "", 0.9, "mammal", "protein_coding", GFP_FRAGMENT, "BsaI, BsmBI", 5, "40:60"],
         ["", 60, "N" * 10 + "TATAAA" + "N" * 25 + "GCCACCATGG" + "N" * 9, 0.9, "mammal", "none", "",
          "EcoRI", 5, "35:65"]],
        inputs=[prompt, n_bases, mask, temperature, page.species, page.region, protein, avoid, max_homopolymer, gc],
        label="Examples (the last two: a GFP fragment back-translated without BsaI/BsmBI sites, Golden "
              "Gate ready; a template with fixed TATA and Kozak elements)")

    @on_gpu
    def design(model, species, region, prompt, upload, n_bases, mask, mode, temperature, top_k, top_p, seed,
               samples, speculative, protein=None, codon_table=1, avoid=None, max_homopolymer=0, gc=None,
               gc_window=0, flank=None, progress=gr.Progress()):  # noqa: B008
        # the constraint fields have defaults, so API clients written before them still work
        try:
            prompt_bases = Service.sequence(prompt, upload, "prompt", allow_empty=True)
            if flank:  # named before any work, not after the designs are made
                Service.sequence(flank, None, "downstream flank", allow_empty=True)
            # numbers go on as the form sent them: the request layer checks every field and names it
            options = dict(mask=mask, species=species, region=region, mode=mode, temperature=temperature,
                           top_k=top_k, top_p=top_p, seed=seed, samples=samples, stream_every=8, protein=protein,
                           codon_table=codon_table, avoid=avoid, max_homopolymer=max_homopolymer, gc=gc,
                           gc_window=gc_window)
            if protein and str(protein).strip():
                n_bases = None  # the protein sets the length (3 bases a residue), as its field says
            for result, note in service.design_stream(model, prompt_bases, n_bases, bool(speculative), **options):
                progress(len(result.sequences[0]) / result.n_bases, desc="generating")
                shown = {sequences_html: fmt.bases_html(result.prompt, result.fixed_bases, result.sequences,
                                                        result.mask)}
                if not result.done:  # the last run's results go while this one streams
                    yield {**shown, confidence: None, logo: None, checks: "", prompt_info: "", files: None,
                           design_json: None,
                           fasta_copy: "", status: f"generating… {len(result.sequences[0]):,} of {result.n_bases:,}"}
                    continue
                try:
                    reports = service.design_reports(result, flank)
                    checks_text = fmt.report_markdown(reports)
                except ModelError as exc:  # no room for the checks' pass: the designs made stand without them
                    reports, checks_text = [], f"*The checks were not run: {fmt.plain(exc)}. The designs are shown " \
                                               "without them.*"
                done = {**shown, confidence: confidence_figure(result.base_probs, result.base_entropy,
                                                               result.sequences),
                        checks: checks_text, prompt_info: fmt.prompt_info(result),
                        status: fmt.timing_line(result, note) + "\n\n" + fmt.design_provenance(result),
                        files: service.design_files(result), fasta_copy: fmt.fasta_text(result.sequences),
                        design_json: {**result.to_dict(), "reports": reports}}
                # the logo's ~500 glyphs take matplotlib longer (about 2 s on 2 cores) than a short design takes
                # the model: the designs and their checks go first, the logo follows
                yield {**done, logo: None}
                if result.base_marginals is not None:
                    yield {**done, logo: logo_figure(result.base_marginals[0])}
        except (CarbonError, ValueError, OSError) as exc:
            fail(exc)

    inputs = [*page.choices, prompt, upload, n_bases, mask, mode, temperature, top_k, top_p, seed, samples,
              speculative, protein, codon_table, avoid, max_homopolymer, gc, gc_window, flank]
    outputs = [sequences_html, confidence, checks, prompt_info, status, files, logo, fasta_copy, design_json]
    running = run_on_click(run, design, inputs, outputs, "generate")
    # stops the design at its next streamed update and frees what it held (as closing the tab does)
    stop.click(None, None, None, cancels=[running], api_visibility="private")
    gr.on([mask.change, n_bases.change], mask_check, [mask, n_bases], mask_status, api_name="check_mask", queue=False)
