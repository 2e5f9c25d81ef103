"""Design: conditional generation with an exact length, a mask and constraints, streamed into the page."""

from __future__ import annotations

import functools

import gradio as gr

from ...core.dna import mask_from_template
from ...core.validate import whole_number
from ...errors import CarbonError, ModelError
from ...inference.constraints import KINDS as CONSTRAINT_KINDS
from ...inference.constraints import DesignConstraints, Field
from ...inference.request import MAX_SAMPLES
from .. import formatting as fmt
from ..exports import design_settings, designs_fasta
from ..plots import confidence_figure, logo_figure
from ..service import Service
from .common import FREE, Page, guarded, sequence_inputs

#: the first 60 residues of Aequorea victoria GFP (UniProt P42212), for the constrained-design example
GFP_FRAGMENT = "MSKGEELFTGVVPILVELDGDVNGHKFSVSGEGEGDATYGKLTLKFICTTGKLPVPWPTL"


#: the tab's examples by what each shows (its button's words), each by field name (the rest as the form
#: leaves them); the last two are constrained
EXAMPLES = {
    "Mammal coding sequence, 240 bases after a start": dict(
        prompt="ATGGCTTCAGATCTCGAAGCTTCAGCTCCA", n_bases=240, temperature=0.9, species="mammal",
        region="protein_coding"),
    "Fungus, 120 bases ending in two stops (mask)": dict(
        n_bases=120, mask="N" * 114 + "TAATAA", temperature=0.9, species="fungus", region="none"),
    "Plant ORF after TATA and Kozak (ATG…TGA mask)": dict(
        prompt="TATAAAAGGCGCGCCACC", n_bases=90, mask="ATG" + "N" * 84 + "TGA", temperature=0.7, species="plant",
        region="none"),
    "GFP fragment, no BsaI/BsmBI sites (Golden Gate)": dict(
        prompt="GCCACC", n_bases=None, temperature=0.9, species="mammal", region="protein_coding",
        protein=GFP_FRAGMENT, avoid="BsaI, BsmBI", max_homopolymer=5, gc="40:60"),
    "Fixed TATA and Kozak elements, no EcoRI": dict(
        n_bases=60, mask="N" * 10 + "TATAAA" + "N" * 25 + "GCCACCATGG" + "N" * 9, temperature=0.9,
        species="mammal", region="none", avoid="EcoRI", max_homopolymer=5, gc="35:65"),
}


def constraint_input(field: Field) -> gr.Number | gr.Textbox:
    """A constraint's field as the form shows it: a plain number or a line of text (no widget limits: the
    request layer checks the value and names the field)."""
    if field.number:
        return gr.Number(label=field.label, value=field.default)
    return gr.Textbox(label=field.label, placeholder=field.placeholder)  # no value of its own: see run_on_click


def _value_before_typing(component):
    """What an example leaves in a field it does not set: the field's value before the user types."""
    return "" if component.value is None else component.value


def design_length(n_bases, protein=None) -> tuple[int | None, str]:
    """(the bases the design will have, why): a protein's codons where one is given (it sets the length, as the
    request does), else the number asked for; None where neither says."""
    fixed = DesignConstraints.from_options(protein=protein).fixed_length() if protein and str(protein).strip() \
        else None
    if fixed:
        return fixed
    asked = whole_number(n_bases, "the number of bases", 0) if n_bases not in (None, "") else None
    return asked, f"{asked:,} bases asked for" if asked else ""


def mask_check(mask, n_bases, protein=None) -> str:
    """How the length, a protein and the mask stand together, as they are typed: the length the design will
    have, and each conflict named before Generate (not after it)."""
    try:
        length, why = design_length(n_bases, protein)
        positions = len(mask_from_template(mask)) if mask and mask.strip() else None
    except CarbonError as exc:
        return f"⚠️ {fmt.plain(exc)}"
    said = []
    if protein and str(protein).strip():
        said.append(f"ℹ️ {why}: the design will have {length:,} bases, encoded from its first base"
                    + (f" (the {n_bases:,.0f} typed under Bases are not used)"
                       if isinstance(n_bases, (int, float)) and n_bases and n_bases != length else "") + ".")
        if positions and mask.strip().upper().strip("N"):
            said.append("⚠️ the mask fixes bases where the protein's codons go: they must be codons of it (a "
                        "Kozak or other element before the start belongs in the prompt).")
    if positions is None:
        said.append("No mask: every position may be any base.")
    elif length and positions != length:
        said.append(f"⚠️ the mask has {positions:,} positions but the design will have {length:,} bases"
                    + (": **Pad with N** (after or before it) makes up the rest." if positions < length else "."))
    else:
        said.append(f"✓ mask of {positions:,} positions")
    return " ".join(said)


def pad_mask(mask, n_bases, protein=None, before: bool = False) -> str:
    """The mask with N (any base) added after it (or `before` it: a mask that ends in a stop) up to the
    design's length; as it was where it is not shorter or no length is known."""
    try:
        length, _ = design_length(n_bases, protein)
    except CarbonError:
        return mask
    mask = (mask or "").strip()
    if not length or len(mask) >= length:
        return mask
    padding = "N" * (length - len(mask))
    return padding + mask if before else mask + padding


def length_of_protein(protein, n_bases):
    """The Bases field following a protein as it is typed (its codons set the length); as it was without one."""
    try:
        length, _ = design_length(n_bases, protein)
    except CarbonError:
        return gr.skip()
    return length if protein and str(protein).strip() and length else gr.skip()


def design_tab(page: Page) -> None:
    service = page.service
    with gr.Row():
        with gr.Column(scale=3):
            prompt, upload = sequence_inputs("DNA prompt (bases or FASTA; may be empty)", lines=3)
            with gr.Row():
                n_bases = gr.Number(label="Bases to generate (exact)", value=300)
                samples = gr.Number(label=f"Samples (1-{MAX_SAMPLES})", value=2)
                # a text box: a browser shows an empty number field as 0, which made every design seed 0's
                seed = gr.Textbox(label="Seed (empty: random, reported with the design)", value="",
                                  placeholder="random")
            mask = gr.Textbox(label="Per-position mask (IUPAC over the new bases, optional)",
                              placeholder="e.g. NNNNNNNNNTAA or RYRYRY…")
            with gr.Row():
                mask_status = gr.Markdown("No mask: every position may be any base.")
                pad_after = gr.Button("Pad with N after", size="sm", scale=0, min_width=140)
                pad_before = gr.Button("Pad with N before", size="sm", scale=0, min_width=140)
        with gr.Column(scale=2):
            with gr.Row():
                species, region = page.tag_dropdowns(scoring=False)
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
        with gr.Row():  # each constraint's own fields, as it names them
            constraint_fields = {}
            for kind in CONSTRAINT_KINDS:
                with gr.Column(min_width=260):
                    constraint_fields.update({field.name: constraint_input(field) for field in kind.fields})
        flank = gr.Textbox(label="Downstream flank (ranks designs with it)", placeholder="bases that follow the insert")
    example_inputs = {"prompt": prompt, "n_bases": n_bases, "mask": mask, "temperature": temperature,
                      "species": species, "region": region, **constraint_fields}
    gr.Examples([[example.get(name, _value_before_typing(component)) for name, component in example_inputs.items()]
                 for example in EXAMPLES.values()],
                inputs=list(example_inputs.values()), example_labels=list(EXAMPLES), label="Examples (fill the form)")
    sequences_html = gr.HTML(label="Designs")
    status = gr.Markdown()
    with gr.Accordion("Designs as FASTA (to copy)", open=False):
        fasta_copy = gr.Code(label="FASTA", language=None, buttons=["copy", "download"], interactive=False)
    confidence = gr.Plot(label="Per-base confidence")
    logo = gr.Plot(label="Sequence logo of design 1 (information in bits; what each base was drawn from)")
    checks = gr.Markdown(elem_classes="carbon-table")
    with gr.Accordion("Exact prompt sent (text and token ids)", open=False):
        prompt_info = gr.Code(label="prompt", language=None)
    files = gr.File(label="Downloads (FASTA, GenBank, JSON)", file_count="multiple")
    with gr.Accordion("Raw result (JSON)", open=False):
        design_json = gr.JSON()
    made = gr.State(None)  # the designs as far as they are made, while they stream: what a Stop keeps

    @page.runs_model
    def design(model, species, region, prompt, upload, n_bases, mask, mode, temperature, top_k, top_p, seed,
               samples, speculative, progress=gr.Progress(), **named):  # noqa: B008
        # the constraints' fields and the flank come by name (each constraint names its own) and have
        # defaults, so API clients written before them still work
        flank = named.pop("flank", None)
        constraints = DesignConstraints.from_options(**named)
        prompt_bases = Service.sequence(prompt, upload, "prompt", allow_empty=True)
        if flank:  # named before any work, not after the designs are made
            Service.sequence(flank, None, "downstream flank", allow_empty=True)
        # numbers go on as the form sent them: the request layer checks every field and names it
        options = dict(mask=mask, species=species, region=region, mode=mode, temperature=temperature,
                       top_k=top_k, top_p=top_p, seed=seed, samples=samples, stream_every=8,
                       constraints=constraints)
        if constraints.fixed_length():
            n_bases = None  # a constraint sets the length (a protein: 3 bases a residue), as its field says
        for result, note in service.design_stream(model, prompt_bases, n_bases, bool(speculative), **options):
            progress(len(result.sequences[0]) / result.n_bases, desc="generating")
            # while streaming, the bases as plain text: a 64 x 1,500-base design drawn coloured at every update
            # (3.5 MB of HTML at its end) kept a browser busy for 40 s after the model's 6 s, Stop unanswered
            shown = {sequences_html: fmt.bases_html(result.prompt, result.fixed_bases, result.sequences,
                                                    result.mask, coloured=result.done)}
            if not result.done:  # the last run's results go while this one streams
                yield {**shown, confidence: None, logo: None, checks: "", prompt_info: "", files: None,
                       design_json: None, made: result,
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
                    files: service.design_files(result, reports), fasta_copy: designs_fasta(result),
                    design_json: {"settings": design_settings(result), **result.to_dict(), "reports": reports},
                    made: None}
            # the logo is the largest output (four bars a base, the whole design): the designs and their checks
            # go first, the logo follows
            yield {**done, logo: None}
            if result.base_marginals is not None:
                yield {**done, logo: logo_figure(result.base_marginals[0])}

    inputs = [page.model, species, region, prompt, upload, n_bases, mask, mode, temperature, top_k, top_p, seed,
              samples, speculative]
    outputs = [sequences_html, confidence, checks, prompt_info, status, files, logo, fasta_copy, design_json, made]
    # the progress bar sits on the status line: over the designs it would hide their first lines as they stream
    running = page.run_on_click(run, design, inputs, outputs, "generate", progress_on=[status],
                                by_name={**constraint_fields, "flank": flank})
    @guarded
    def stopped(result):
        """After a Stop: the designs as far as they were made, said so, and offered for download (nothing
        changes where no design was streaming, or it had just finished)."""
        if result is None:
            return {status: gr.skip()}
        made_bases = len(result.sequences[0]) if result.sequences else 0
        samples = len(result.sequences)
        return {sequences_html: fmt.bases_html(result.prompt, result.fixed_bases, result.sequences, result.mask),
                status: f"**Stopped** after {made_bases:,} of {result.n_bases:,} bases "
                        f"({samples} design{'s' if samples != 1 else ''}, as far as each was made): kept above and in "
                        "the downloads, without their checks. " + fmt.design_provenance(result),
                files: service.design_files(result), fasta_copy: designs_fasta(result),
                design_json: {"settings": design_settings(result), **result.to_dict(), "stopped": True},
                made: None}

    # stops the design at its next streamed update and frees what it held (as closing the tab does), then
    # shows what was made as stopped, with its files
    stop.click(None, None, None, cancels=[running], api_visibility="private").then(
        stopped, made, [sequences_html, status, files, fasta_copy, design_json, made], api_visibility="private")
    protein = constraint_fields["protein"]
    gr.on([mask.change, n_bases.change, protein.change], guarded(mask_check), [mask, n_bases, protein], mask_status,
          api_name="check_mask", queue=False)
    protein.change(guarded(length_of_protein), [protein, n_bases], n_bases, api_visibility="private", queue=False)
    for button, before in ((pad_after, False), (pad_before, True)):
        button.click(guarded(functools.partial(pad_mask, before=before)), [mask, n_bases, protein], mask,
                     api_visibility="private", queue=False)
