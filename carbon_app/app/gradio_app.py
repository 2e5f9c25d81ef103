"""Carbon Studio: the Blocks app, declared top to bottom, with thin handlers.

Every event runs in one concurrency group ("gpu", one at a time), so the tabs
share the GPU queue; every event has an `api_name` for `gradio_client`.
"""

from __future__ import annotations

import json
import os

import gradio as gr

from ..assets import ASSETS
from ..errors import CarbonError, InputError
from ..inference.generate import MAX_SAMPLES
from ..inference.score import DEFAULT_WINDOW
from ..model.manager import ModelManager
from . import formatting as fmt
from .plots import confidence_figure, consequence_figure, scan_figure, site_figure, variant_figure, vcf_figure
from .service import DEMO_GENOME, NO_GENOME, AppConfig, Service

GPU = dict(concurrency_id="gpu", concurrency_limit=1)
#: the first 60 residues of Aequorea victoria GFP (UniProt P42212), for the constrained-design example
GFP_FRAGMENT = "MSKGEELFTGVVPILVELDGDVNGHKFSVSGEGEGDATYGKLTLKFICTTGKLPVPWPTL"
CONTEXT_BASES = 25  # the Variant tab ranks a delta among the 150 or so substitutions this close, unless told not to
FREE = dict(allow_custom_value=True)  # the value goes to the service or engine, which names a wrong one

try:  # on a Hugging Face ZeroGPU Space, GPU work must run inside spaces.GPU
    import spaces

    on_gpu = spaces.GPU
except ImportError:
    def on_gpu(fn):
        return fn


#: On a phone-width page (400 px) a wide table scrolls sideways instead of squeezing each column to a letter.
CSS = """
.carbon-table table { display: block; overflow-x: auto; white-space: nowrap; }
"""


def _fail(exc: Exception):
    """Bad input or a model problem: a message in the page, not a traceback."""
    raise gr.Error(str(exc), print_exception=False)


def _sequence_inputs(label: str, lines: int = 4) -> tuple[gr.Textbox, gr.File]:
    """A paste box with a FASTA upload beside it; the upload wins when both are given."""
    text = gr.Textbox(label=label, lines=lines)
    upload = gr.File(label="…or upload FASTA / GenBank", file_types=[".fa", ".fasta", ".fna", ".txt", ".gb", ".gbk"],
                     height=130)
    return text, upload


def build_app(manager: ModelManager | None = None, config: AppConfig | None = None) -> gr.Blocks:
    service = Service(manager or ModelManager(), config or AppConfig.from_env())
    models = service.config.models
    genomes = list(service.config.genomes)
    examples = json.loads((ASSETS / "examples" / "hbb.json").read_text())
    hbb_path = str(ASSETS / "examples" / examples["file"])
    hbb = Service.sequence(None, hbb_path, "example")

    # -- handlers (thin: widgets in, service, widgets out) ----------------------------------------

    @on_gpu
    def design(model, species, region, prompt, upload, n_bases, mask, mode, temperature, top_k, top_p, seed,
               samples, speculative, protein=None, codon_table=1, avoid=None, max_homopolymer=0, gc=None,
               gc_window=0, flank=None, progress=gr.Progress()):  # noqa: B008
        # the constraint fields have defaults, so API clients written before them still work
        try:
            prompt_bases = Service.sequence(prompt, upload, "prompt", allow_empty=True)
            # numbers go to the engine as the form sent them: it checks every field and names it
            options = dict(mask=mask or None, species=species, region=region, mode=mode, temperature=temperature,
                           top_k=top_k, top_p=top_p, seed=seed, samples=samples, stream_every=8, protein=protein,
                           codon_table=codon_table, avoid=avoid, max_homopolymer=max_homopolymer or None, gc=gc,
                           gc_window=gc_window or None)
            if protein and str(protein).strip():
                n_bases = None  # the protein sets the length (3 bases a residue), as its field says
            for result, note in service.design_stream(model, prompt_bases, n_bases, bool(speculative), **options):
                progress(len(result.sequences[0]) / result.n_bases, desc="generating")
                seqs = fmt.bases_html(result.prompt, result.fixed_bases, result.sequences)
                if not result.done:
                    yield seqs, None, "", "", f"generating… {len(result.sequences[0]):,} of {result.n_bases:,}", \
                        None, None
                    continue
                figure = confidence_figure(result.base_probs, result.base_entropy, result.sequences)
                reports = service.design_reports(result, flank)
                yield (seqs, figure, fmt.report_markdown(reports), fmt.prompt_info(result),
                       fmt.timing_line(result, note), service.design_files(result),
                       {**result.to_dict(), "reports": reports})
        except (CarbonError, ValueError, OSError) as exc:
            _fail(exc)

    def mask_check(mask, n_bases):
        if not mask or not mask.strip():
            return "No mask: every position may be any base."
        try:
            from ..core.dna import mask_from_template

            length = len(mask_from_template(mask))
        except CarbonError as exc:
            return f"⚠️ {exc}"
        if n_bases and length != int(n_bases):
            return f"⚠️ the mask has {length:,} positions but {int(n_bases):,} bases are asked for"
        return f"✓ mask of {length:,} positions"

    def score_one(model, species, region, reference, upload, change, alternate, window, strand, method, genome,
                  cds, context, request, progress):
        """A variant in a pasted sequence or at a genome's coordinates: the verdict, plots, table, files, a link."""
        options = dict(window=window, strand_average=bool(strand), species=species, region=region, method=method)

        def ranking(done: float) -> None:
            progress(done, desc="ranking it among the substitutions nearby")

        try:
            if genome and genome != NO_GENOME:
                if (reference or "").strip() or upload or (alternate or "").strip():
                    raise InputError(f"the genome {genome} is chosen, so the variant is read from it: clear the "
                                     "pasted sequence (or choose the genome 'none' to score within it)")
                genomic, report = service.score_at(model, genome, change, cds, context, ranking, **options)
                data = {**genomic.to_dict(), **report.to_dict(), "genome_window_start": genomic.window_start}
                page = dict(request.headers).get("referer") if request else None
                link = fmt.share_link(page, genome=genome, variant=change.strip(), model=model, window=window,
                                      strand=int(bool(strand)), cds=cds, context=context)
            else:
                record = Service.record(reference, upload, "reference sequence")
                genomic = None
                report = service.score(model, record.sequence, change, alternate, cds, record.coding, context,
                                       ranking, **options)
                data = report.to_dict()
                link = "*A link to a result needs a genome (a pasted sequence is too long for a link).*"
        except (CarbonError, ValueError, OSError) as exc:
            _fail(exc)
        text = "\n\n".join([fmt.variant_markdown(report, genomic), fmt.trust_note(service.model(model)),
                            fmt.RESEARCH_NOTE])
        shown = genomic.placed if genomic else report.score  # positions on the contig when there is one
        return (text, variant_figure(shown), site_figure(shown), fmt.track_rows(shown),
                service.variant_files(shown, data), link, data)

    @on_gpu
    def variant(model, species, region, reference, upload, change, alternate, window, strand, method,
                genome=NO_GENOME, cds=None, context=CONTEXT_BASES, request: gr.Request = None,
                progress=gr.Progress()):  # noqa: B008
        return score_one(model, species, region, reference, upload, change, alternate, window, strand, method,
                         genome, cds, context, request, progress)

    def from_link(request: gr.Request):
        """The Variant tab's inputs from the page's URL (?genome=…&variant=…): a shared link opens on them."""
        query = dict(request.query_params) if request else {}
        if not query.get("variant"):
            return [gr.skip()] * 9 + [False]
        chosen = query.get("model")

        def number(key: str, default: int):  # as typed in the link; the engine names a wrong one
            text = query.get(key, "")
            try:
                return float(text) if text else default
            except ValueError:
                return text

        return [gr.Tabs(selected="variant"), chosen if chosen in models else gr.skip(),
                query.get("genome", NO_GENOME), query["variant"], number("window", DEFAULT_WINDOW),
                query.get("strand") == "1", query.get("cds", ""), number("context", 0), "", True]

    @on_gpu
    def variant_from_link(run, model, species, region, reference, upload, change, alternate, window, strand, method,
                          genome, cds, context, request: gr.Request, progress=gr.Progress()):  # noqa: B008
        if not run:
            return [gr.skip()] * 7
        return score_one(model, species, region, reference, upload, change, alternate, window, strand, method,
                         genome, cds, context, request, progress)

    @on_gpu
    def vcf(model, species, region, genome, upload, window, strand, method, context,
            progress=gr.Progress()):  # noqa: B008
        def tell(done: int, total: int) -> None:
            progress(done / max(total, 1), desc=f"{done:,} of {total:,} ALT alleles")

        try:
            summary, files, rows = service.score_vcf(model, genome, upload, progress=tell, window=window,
                                                     strand_average=bool(strand), species=species, region=region,
                                                     method=method, context=context)
        except (CarbonError, ValueError, OSError) as exc:
            _fail(exc)
        text = "\n\n".join([fmt.vcf_markdown(summary), fmt.trust_note(service.model(model)), fmt.RESEARCH_NOTE])
        return text, vcf_figure(rows), fmt.vcf_rows(rows), files

    @on_gpu
    def scan(model, species, region, sequence, upload, start, end, window, method, cds=None,
             progress=gr.Progress()):  # noqa: B008
        try:
            record = Service.record(sequence, upload, "sequence")
            progress(0, desc="scoring every substitution")
            result, consequences = service.scan(
                model, record.sequence, start, end, cds, record.coding, window=window, species=species,
                region=region, method=method, progress=lambda done: progress(done, desc="scoring every substitution"))
        except (CarbonError, ValueError, OSError) as exc:
            _fail(exc)
        summary = "\n\n".join([fmt.scan_summary(result, consequences), fmt.trust_note(service.model(model)),
                               fmt.RESEARCH_NOTE])
        by_class = consequence_figure(result, consequences) if consequences else None
        rows = [[*row, str(c)] for row, c in zip(result.rows(), consequences, strict=True)] if consequences \
            else result.rows()
        return scan_figure(result), by_class, summary, service.scan_file(result, consequences), {"rows": rows}

    def models_info():
        # server paths stay on the server (and a "path" key would read as a file to gradio_client)
        loaded = [{k: v for k, v in m.items() if k != "path"} for m in service.manager.loaded()]
        table = [[m["name"], m["device"], m["dtype"], m["head_dtype"], f"{m['memory_bytes'] / 2**20:,.1f} MB",
                  fmt.parameters(m["parameters"]), f"{m['context_bases']:,}", m["draft"] or ""] for m in loaded]
        pairs = "\n".join(f"- **{m}** drafts with **{service.manager.draft_for(m) or 'none'}**" for m in models)
        manager = service.manager
        return table, pairs or "No models configured.", {
            "configured": models, "loaded": loaded, "requests_running": service.running,
            "requests_stopped_early": service.stopped,
            "memory_budget_bytes": manager.memory_budget_bytes, "memory_free_bytes": manager.free_bytes()}

    def model_card(name):
        try:
            bundle = service.model(name)
        except CarbonError as exc:
            _fail(exc)
        card = bundle.path / "README.md"
        if not card.exists():
            return f"No model card for {bundle.name}."
        text = card.read_text()
        if text.startswith("---"):  # YAML front matter is for the hub, not for reading
            text = text.split("---", 2)[-1]
        return text

    def tag_dropdowns(name):
        """A model's own tags: choosing another model offers its tags and clears the old choice."""
        species_keys, region_keys = service.tag_choices(name)
        return (gr.Dropdown(choices=species_keys, value="none"), gr.Dropdown(choices=region_keys, value="none"))

    def load(name):
        try:
            service.model(name)
        except CarbonError as exc:
            _fail(exc)
        return models_info()

    def unload(name):
        if name not in models + service.drafts():
            _fail(InputError(f"'{name}' is not one of this server's models ({', '.join(models)})"))
        service.manager.unload(name)
        return models_info()

    # -- layout ------------------------------------------------------------------------------------

    with gr.Blocks(title="Carbon Studio") as demo:
        gr.Markdown("# Carbon Studio\nDesign DNA and score variants with the Carbon DNA language models "
                    "(6-mer tokens, base-level inference).")
        with gr.Row():
            # choice fields take any value and the service or engine names a wrong one: a widget's own
            # check ("Value: x is not in the list of choices") would log a traceback and name no field
            model = gr.Dropdown(models, value=models[0] if models else None, label="Model", scale=2, **FREE)
            species_keys, region_keys = service.tag_choices(models[0] if models else None)
            species = gr.Dropdown(species_keys, value="none", label="Species tag", scale=1, **FREE,
                                  info="the tags this model's scheme has")
            region = gr.Dropdown(region_keys, value="none", label="Region tag", scale=1, **FREE)

        with gr.Tabs() as tabs:
            with gr.Tab("Design", id="design"):
                with gr.Row():
                    with gr.Column(scale=3):
                        prompt, upload = _sequence_inputs("DNA prompt (bases or FASTA; may be empty)", lines=3)
                        with gr.Row():
                            n_bases = gr.Number(label="Bases to generate (exact)", value=300)
                            samples = gr.Number(label=f"Samples (1-{MAX_SAMPLES})", value=2)
                            seed = gr.Number(label="Seed (empty: random)", value=0)
                        mask = gr.Textbox(label="Per-position mask (IUPAC over the new bases, optional)",
                                          placeholder="e.g. NNNNNNNNNTAA or RYRYRY…")
                        mask_status = gr.Markdown("No mask: every position may be any base.")
                    with gr.Column(scale=2):
                        mode = gr.Dropdown([("base level (FNS)", "bp"), ("6-mer token", "token")], value="bp",
                                           label="Mode", **FREE)
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
                confidence = gr.Plot(label="Per-base confidence")
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
                    inputs=[prompt, n_bases, mask, temperature, species, region, protein, avoid, max_homopolymer, gc],
                    label="Examples (the last two: a GFP fragment back-translated without BsaI/BsmBI sites, Golden "
                          "Gate ready; a template with fixed TATA and Kozak elements)")
                design_inputs = [model, species, region, prompt, upload, n_bases, mask, mode, temperature, top_k, top_p,
                                 seed, samples, speculative, protein, codon_table, avoid, max_homopolymer, gc,
                                 gc_window, flank]
                design_outputs = [sequences_html, confidence, checks, prompt_info, status, files, design_json]
                running = run.click(design, design_inputs, design_outputs, api_name="generate", **GPU)
                # stops the design at its next streamed update and frees what it held (as closing the tab does)
                stop.click(None, None, None, cancels=[running], api_visibility="private")
                gr.on([mask.change, n_bases.change], mask_check, [mask, n_bases], mask_status, api_name="check_mask",
                      queue=False)

            with gr.Tab("Variant", id="variant"):
                with gr.Row():
                    with gr.Column(scale=3):
                        genome = gr.Dropdown([("none: the variant is in the sequence below", NO_GENOME), *genomes],
                                             value=NO_GENOME, label="Genome", **FREE,
                                             info="choose one to give the variant at its coordinates")
                        reference, ref_upload = _sequence_inputs("Reference sequence (bases, FASTA or GenBank)")
                    with gr.Column(scale=2):
                        change = gr.Textbox(label="Variant", placeholder="120:A>G, 57:AT>A, 88:C>CTT in the sequence; "
                                            "chr11:5227002:T>A with a genome",
                                            info="1-based; at coordinates also chr11-5227002-T-A, 11:g.5227002T>A "
                                                 "or a VCF line")
                        alternate = gr.Textbox(label="…or the full alternate sequence", lines=2)
                        window = gr.Number(label="Window (bases, centred on the variant)", value=DEFAULT_WINDOW)
                        strand = gr.Checkbox(label="Average with the reverse-complement strand")
                        method = gr.Dropdown([("reference FNS marginals", "marginal"), ("exact chain rule", "chain")],
                                             value="marginal", label="Scoring", **FREE)
                        cds = gr.Textbox(label="Coding sequence (optional)", placeholder="1187..1278,1409..1631,…",
                                         info="a start, exons or complement(…): names the consequence; a GenBank "
                                              "upload's CDS is used when empty")
                        context = gr.Number(label="Context (bases either side, 0 = off)", value=CONTEXT_BASES,
                                            info="ranks the delta among every substitution that close")
                        score_button = gr.Button("Score variant", variant="primary")
                verdict = gr.Markdown(fmt.RESEARCH_NOTE)
                share = gr.Markdown()
                tracks = gr.Plot(label="Per-base tracks")
                site = gr.Plot(label="Base probabilities at the site")
                track_table = gr.Dataframe(headers=["ref position", "ref log-prob", "alt log-prob", "delta"],
                                           label="Aligned tracks", max_height=300)
                variant_files = gr.File(label="Downloads (TSV, JSON)", file_count="multiple")
                with gr.Accordion("Raw result (JSON)", open=False):
                    variant_json = gr.JSON()
                gr.Examples([[hbb, v["variant"], "", 1500, True, NO_GENOME, examples["hbb_cds"]]
                             for v in examples["variants"]],
                            inputs=[reference, change, alternate, window, strand, genome, cds],
                            label="Worked example: human beta-globin (HBB), " + "; ".join(
                                f"{v['variant']} = {v['hgvs']}, {v['name']}" for v in examples["variants"]))
                if DEMO_GENOME in genomes:
                    gr.Examples([["", f"{examples['genome_contig']}:{v['variant']}", "", 1500, True, DEMO_GENOME,
                                  examples["hbb_cds"]] for v in examples["variants"]],
                                inputs=[reference, change, alternate, window, strand, genome, cds],
                                label=f"The same at coordinates on the bundled {DEMO_GENOME} genome")
                variant_inputs = [model, species, region, reference, ref_upload, change, alternate, window, strand,
                                  method, genome, cds, context]
                variant_outputs = [verdict, tracks, site, track_table, variant_files, share, variant_json]
                score_button.click(variant, variant_inputs, variant_outputs, api_name="score_variant", **GPU)

            with gr.Tab("VCF batch", id="vcf"):
                gr.Markdown("Score every ALT allele of a VCF against one of this server's genomes. Every record "
                            "comes back, in order, with INFO `CARBON_DELTA` or the reason it has none "
                            f"(`CARBON_PROBLEM`). Up to {service.config.max_vcf_alts:,} ALT alleles here; the "
                            "command line (`score-vcf`) has no limit.")
                with gr.Row():
                    with gr.Column(scale=3):
                        vcf_genome = gr.Dropdown(genomes, value=genomes[0] if genomes else None, label="Genome",
                                                 **FREE)
                        vcf_upload = gr.File(label="VCF (.vcf or bgzipped .vcf.gz)", file_types=[".vcf", ".gz"],
                                             height=130)
                    with gr.Column(scale=2):
                        vcf_window = gr.Number(label="Window (bases)", value=DEFAULT_WINDOW)
                        vcf_strand = gr.Checkbox(label="Average with the reverse-complement strand")
                        vcf_method = gr.Dropdown([("reference FNS marginals", "marginal"),
                                                  ("exact chain rule", "chain")], value="marginal", label="Scoring",
                                                 **FREE)
                        vcf_context = gr.Number(label="Context (bases either side, 0 = off)", value=0,
                                                info="adds CARBON_CONTEXT: the share of nearby substitutions "
                                                     "each ALT is more damaging than")
                        vcf_button = gr.Button("Score VCF", variant="primary")
                vcf_summary = gr.Markdown()
                vcf_plot = gr.Plot(label="Deltas along the genome")
                vcf_table = gr.Dataframe(headers=fmt.VCF_TABLE_COLUMNS, label="Every ALT allele (click a column "
                                         "to sort)", max_height=400, elem_classes="carbon-table")
                vcf_files = gr.File(label="Downloads (annotated VCF, TSV)", file_count="multiple")
                if DEMO_GENOME in genomes:
                    gr.Examples([[DEMO_GENOME, str(ASSETS / "examples" / examples["vcf"])]],
                                inputs=[vcf_genome, vcf_upload],
                                label="Example: HBB variants (HbS, HbC, HbE, thalassaemia alleles, one wrong REF)")
                vcf_button.click(vcf, [model, species, region, vcf_genome, vcf_upload, vcf_window, vcf_strand,
                                       vcf_method, vcf_context], [vcf_summary, vcf_plot, vcf_table, vcf_files],
                                 api_name="score_vcf", **GPU)

            with gr.Tab("Mutation scan", id="scan"):
                with gr.Row():
                    with gr.Column(scale=3):
                        scan_sequence, scan_upload = _sequence_inputs("Sequence (bases, FASTA or GenBank)")
                    with gr.Column(scale=2):
                        with gr.Row():
                            scan_start = gr.Number(label="Region start (1-based)", value=1)
                            scan_end = gr.Number(label="Region end", value=60)
                        scan_window = gr.Number(label="Window (bases)", value=DEFAULT_WINDOW)
                        scan_method = gr.Dropdown([("reference FNS marginals", "marginal"),
                                                   ("exact chain rule", "chain")], value="marginal", label="Scoring",
                                                  **FREE)
                        scan_cds = gr.Textbox(label="Coding sequence (optional)", placeholder="1187..1278,…",
                                              info="names each substitution's consequence")
                        scan_button = gr.Button("Scan every substitution", variant="primary")
                heatmap = gr.Plot(label="delta log-likelihood of every substitution")
                by_class = gr.Plot(label="By consequence (with a coding sequence)")
                scan_summary = gr.Markdown(elem_classes="carbon-table")
                scan_file = gr.File(label="Download (TSV)")
                with gr.Accordion("Raw result (JSON)", open=False):
                    scan_json = gr.JSON()
                region_start, region_end = examples["scan_region"]
                gr.Examples([[hbb, region_start, region_end, 1500, examples["hbb_cds"]]],
                            inputs=[scan_sequence, scan_start, scan_end, scan_window, scan_cds],
                            label="Example: the first 30 codons of HBB")
                scan_button.click(scan, [model, species, region, scan_sequence, scan_upload, scan_start, scan_end,
                                         scan_window, scan_method, scan_cds],
                                  [heatmap, by_class, scan_summary, scan_file, scan_json], api_name="scan", **GPU)

            with gr.Tab("Models", id="models"):
                gr.Markdown(f"Device: **{service.manager.device}**, dtype **{str(service.manager.dtype)[6:]}**, "
                            f"memory budget **{service.manager.memory_budget_bytes / 2**30:.1f} GiB**. Models are "
                            "chosen by the server (CARBON_MODEL / CARBON_MODELS), never by a path typed here; "
                            f"genomes too (CARBON_REFERENCES): {', '.join(genomes) or 'none'}.")
                with gr.Row():
                    card_model = gr.Dropdown(models + service.drafts(), value=models[0] if models else None, **FREE,
                                             label="Model")
                    load_button = gr.Button("Load")
                    unload_button = gr.Button("Unload")
                    refresh = gr.Button("Refresh")
                loaded_table = gr.Dataframe(headers=["name", "device", "dtype", "head dtype", "memory", "parameters",
                                                     "context (bases)", "draft"], label="Loaded models")
                pairing = gr.Markdown()
                models_json = gr.JSON(visible=False)
                with gr.Accordion("Model card", open=True):
                    card = gr.Markdown()
                # a status read, answered at once even while a long request holds the GPU
                refresh.click(models_info, None, [loaded_table, pairing, models_json], api_name="models", queue=False)
                load_button.click(load, card_model, [loaded_table, pairing, models_json], api_name="load_model",
                                  **GPU).then(model_card, card_model, card, api_name="model_card")
                unload_button.click(unload, card_model, [loaded_table, pairing, models_json], api_name="unload_model",
                                    **GPU)
                card_model.change(model_card, card_model, card, api_visibility="private")
        model.change(tag_dropdowns, model, [species, region], api_visibility="private", queue=False)
        # a shared link (?genome=…&variant=…) opens the Variant tab on its inputs and scores them
        link_run = gr.State(False)
        demo.load(from_link, None, [tabs, model, genome, change, window, strand, cds, context, reference, link_run],
                  api_visibility="private", queue=False).then(
            variant_from_link, [link_run, *variant_inputs], variant_outputs, api_visibility="private", **GPU)
        demo.load(models_info, None, [loaded_table, pairing, models_json], api_visibility="private")
        demo.load(model_card, card_model, card, api_visibility="private")  # the card on first view too
    return demo


def launch() -> None:
    """Start the server: preload the configured models, bounded queue, port 7860."""
    manager = ModelManager()
    config = AppConfig.from_env()
    if os.environ.get("CARBON_PRELOAD", "1") != "0":
        for name in config.models:
            bundle = manager.get(name)
            if bundle.draft:
                manager.get(bundle.draft)
    demo = build_app(manager, config)
    demo.queue(max_size=int(os.environ.get("CARBON_QUEUE_SIZE", "32")), default_concurrency_limit=1)
    demo.launch(css=CSS, server_name=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                max_file_size=f"{5}mb", allowed_paths=[str(ASSETS / "examples")])
