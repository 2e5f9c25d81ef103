"""Results in words and HTML for the page: plain functions of engine results, no Gradio here."""

from __future__ import annotations

import html
from statistics import median
from urllib.parse import urlencode

from ..core.coding import CLASSES
from ..genome.vcf import Remedies
from ..inference.checks import LOW_COMPLEXITY_BASES, frame_owner
from ..inference.spec import METHOD_WORDS, measured_spec
from ..model.card import quality_delta_radius, quality_method
from .exports import LINE
from .plots import BASE_COLOURS

RESEARCH_NOTE = ("*Research use only. A model's likelihood is not a clinical classification; "
                 "the bundled demo models are for demonstration, not biological conclusions.*")


GROUP = 10  # bases per group, and LINE per line, as GenBank and SnapGene lay sequences out


def sequence_block(seq: str, first: int = 1, marked: set[int] | None = None, highlight: dict[int, str] | None = None,
                   title: str = "", coloured: bool = True) -> str:
    """Bases as a biologist reads them: 60 a line in groups of 10, each line led by its first position
    (numbered from `first`), coloured by base (a run of one base is one element: `BASE_CSS` colours it);
    positions in `marked` (0-based) underlined (fixed by a mask), those in `highlight` drawn on the given
    background (a variant). Not `coloured`: the bases as plain text (the marks kept), a tenth of the
    elements for a browser to lay out, for designs still streaming."""
    marked, highlight = marked or set(), highlight or {}
    width = len(f"{first + max(len(seq) - 1, 0):,}")

    def special(at: int) -> bool:
        return at in marked or at in highlight

    def run_html(bases: str, at: int) -> str:
        base = bases[0]
        style = [f"background:{highlight[at]};font-weight:bold"] if at in highlight else []
        if at in marked:
            style.append("text-decoration:underline")
        attributes = (f' class="b{base}"' if coloured and base in BASE_COLOURS else "") + \
            (f' style="{";".join(style)}"' if style else "")
        return f"<span{attributes}>{html.escape(bases)}</span>" if attributes else html.escape(bases)

    lines = []
    for start in range(0, len(seq), LINE):
        groups = []
        for g in range(start, min(start + LINE, len(seq)), GROUP):
            runs, i, end = [], g, min(g + GROUP, len(seq), start + LINE)
            while i < end:  # a run of one base; a marked or highlighted base stands alone
                j = i + 1
                if not special(i):
                    while j < end and seq[j] == seq[i] and not special(j):
                        j += 1
                runs.append(run_html(seq[i:j], i))
                i = j
            groups.append("".join(runs))
        lines.append(f'<span class="carbon-ruler">{first + start:>{width},}</span> ' + " ".join(groups))
    heading = f"<b>{html.escape(title)}</b><br>" if title else ""
    return f'<div class="carbon-seq">{heading}' + "\n".join(lines) + "</div>"


#: The page's colour for each base in a sequence block (the plots' own colours), as CSS rules.
BASE_CSS = "".join(f".carbon-seq .b{base} {{ color: {colour}; }}\n" for base, colour in BASE_COLOURS.items())


#: the most bases the page colours at once: past it a design's bases are plain text (64 designs of 1,500 bases
#: coloured took a browser 7 s to lay out, on top of the model's 6 s; the colours help read a few, not thousands)
COLOURED_BASES = 20_000


def bases_html(prompt: str, fixed: str, sequences: list[str], mask: str | None = None, coloured: bool = True) -> str:
    """Each design as a numbered block (1 = its first new base) under the prompt's last bases; bases a mask
    fixes are underlined; coloured by base (unless not `coloured`, or past COLOURED_BASES in all)."""
    too_many = sum(map(len, sequences)) > COLOURED_BASES
    coloured = coloured and not too_many
    marked = {i for i, code in enumerate(mask or "") if code in "ACGT"}
    shown = prompt[-LINE:]
    context = (f'<div class="carbon-prompt">prompt{" (last 60 bases)" if len(prompt) > LINE else ""}: '
               f'<span>{html.escape(shown)}</span>'
               + (f" (its last {len(fixed)} base{'s continue' if len(fixed) > 1 else ' continues'} into the first "
                  "generated 6-mer)" if fixed else "") + "</div>") if prompt else ""
    blocks = [sequence_block(seq, 1, marked, title=f"design {i} ({len(seq):,} bases)", coloured=coloured)
              for i, seq in enumerate(sequences, start=1)]
    legend = ('<div style="font-size:0.85em;color:#666">positions count from the first new base'
              + ("; underlined: fixed by the mask" if marked else "")
              + (f"; in plain text past {COLOURED_BASES:,} bases, so the page stays quick" if too_many else "")
              + "</div>")
    return context + legend + "".join(blocks)


def design_provenance(result) -> str:
    """What made a design, in one line: enough to make it again."""
    tags = result.tags or "none"
    made_by = result.provenance
    weights = f" (weights {made_by.short_weights}, {made_by.app})" if made_by else ""
    parts = [f"model **{result.model}**{weights}", f"tags `{tags}`", f"mode {result.mode}",
             "greedy" if result.temperature == 0 else f"temperature {result.temperature:g}",
             f"top-k {result.top_k or 'off'}", f"top-p {result.top_p:g}", f"seed {result.seed}",
             f"mask {'given' if result.mask else 'none'}", f"prompt {len(result.prompt):,} bases",
             "speculative decoding " + (f"on, drafted by {result.speculative.draft_model}" if result.speculative
                                        else "off")]
    if result.constraints:
        shown = result.constraints.options().items()
        parts.append("constraints " + ", ".join(f"{name}={text}" for name, text in shown))
    return "*Made with " + "; ".join(parts) + ".*"


def variant_blocks(scored, reach: int = 30) -> str:
    """The reference and the alternate around the variant, numbered, the changed bases highlighted."""
    offset = scored.variant.pos - scored.window_start  # the variant's place in the window
    lo = max(0, offset - reach)
    ref_hi = min(len(scored.ref_window), offset + len(scored.variant.ref) + reach)
    alt_hi = min(len(scored.alt_window), offset + len(scored.variant.alt) + reach)
    first = scored.window_start + lo
    ref = sequence_block(scored.ref_window[lo:ref_hi], first,
                         highlight={offset - lo + i: "#e6e6e6" for i in range(len(scored.variant.ref))},
                         title=f"reference {first:,}–{first + ref_hi - lo - 1:,}")
    alt = sequence_block(scored.alt_window[lo:alt_hi], first,
                         highlight={offset - lo + i: "#ffd6d6" for i in range(len(scored.variant.alt))},
                         title=f"alternate ({scored.variant})")
    return ref + alt


def verdict(scored) -> str:
    """The delta in plain words: a direction only when all tokenization frames agree on it."""
    words = {
        "less": "the alternate allele is **less** likely than the reference under the model",
        "more": "the alternate allele is **more** likely than the reference under the model",
        "unclear": "**no clear effect**: the delta is within its spread over the 6-mer frames, which "
                   "disagree on its sign",
    }[scored.direction]
    frames = len(scored.frame_deltas)
    spread = (f"; over the {frames} tokenization frames it ranges {min(scored.frame_deltas):+.4f} to "
              f"{max(scored.frame_deltas):+.4f} (sd {scored.frame_spread:.4f})" if frames > 1 else "")
    indel = ""
    if scored.inserted_ll or scored.deleted_ll:
        counted = scored.delta + scored.inserted_ll - scored.deleted_ll
        indel = (f"\n\nFor an indel the delta sums the bases both alleles have; its own bases are apart: "
                 f"inserted {scored.inserted_ll:+.4f}, deleted {scored.deleted_ll:+.4f}, so with them the delta "
                 f"would be {scored.delta:+.4f} {scored.inserted_ll:+.4f} − ({scored.deleted_ll:+.4f}) = "
                 f"{counted:+.4f}"
                 + (f" (the whole windows' difference, {scored.delta_whole_window:+.4f})."
                    if scored.delta_radius is None else "."))
    return (f"### delta = LL(alt) − LL(ref) = {scored.delta:+.4f}\n{words} (natural log{spread}). "
            f"{scored.spec.sentence()} The windows lie within {scored.window_start:,}–{scored.window_end:,}.{indel}")


#: the marks that make a link, an image, code or emphasis of text (a `(` or `!` alone makes nothing)
_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*[]"})


def plain(text) -> str:
    """Text that may hold what a client typed, made safe to place in Markdown or HTML: nothing in it becomes
    an element, a link or emphasis (a variant written `<img src=…>` or `[sign in](…)` shows as typed).
    Markdown's marks are escaped first, then HTML's (<, > and &, which Markdown shows as the characters)."""
    return html.escape(str(text).translate(_MARKDOWN_SPECIAL), quote=False)


def ranking_pending(radius) -> str:
    """What the context line says while a delta is being ranked among the substitutions within `radius`."""
    return f"ranking it among every substitution within {int(radius):,} bases…"


def variant_forms(scored, contig: str = "") -> str:
    """The forms of a scored variant a person cross-checks: its normal (VCF) form and its HGVS name."""
    return plain(f"normal form {contig}{scored.variant}, HGVS {contig}{scored.hgvs_name}")


def variant_markdown(report, genomic=None, context_note: str = "") -> str:
    """The verdict, then where on the genome, what it does to the protein and how it ranks nearby (or, before
    the ranking is known, `context_note`: that it is under way, or why it stopped)."""
    parts = [verdict(genomic.placed if genomic is not None else report.score)]
    where, offset = "", 0
    if genomic is not None:
        placed = genomic.placed
        parts.append(f"**{plain(genomic.variant.label)}** on **{genomic.reference}** (positions on "
                     f"{genomic.contig}): {variant_forms(placed, genomic.contig + ':')}."
                     + "".join(f" *Note: {note}.*" for note in genomic.notes))
        where, offset = f" of {genomic.contig}", genomic.offset
    else:
        parts.append(f"**{plain(report.score.variant.written)}**: {variant_forms(report.score)}")
    if report.consequence is not None:
        parts.append(f"**Consequence:** {report.consequence}")
    if report.context is not None:
        parts.append(f"**In context:** {report.context.sentence()} (positions {offset + report.context.start:,}–"
                     f"{offset + report.context.end:,}{where}, each substitution scored the same way).")
    elif report.unranked:
        parts.append(f"**In context:** *not ranked: {report.unranked}.*")
    elif context_note:
        parts.append(f"**In context:** *{context_note}*")
    return "\n\n".join(parts)




def delta_radius_words(radius: int | None) -> str:
    """Where a delta is summed, in words."""
    return "summed over the whole window" if radius is None else f"summed within {radius} bases of the variant"


def setup_line(provenance) -> str:
    """How a score's setup stands to the model's own (the one its quality was measured with), as the page shows
    it beside the score: every difference named, tags included."""
    if not provenance.differences:
        return "In the model's own scoring setup."
    return "**Not the model's own scoring setup**: " + "; ".join(provenance.differences) + "."


def score_provenance(scored) -> str:
    """What produced a variant score, in one line (the setup itself is the verdict's sentence)."""
    made_by = scored.provenance
    tags = (scored.species_tag or "") + (scored.region_tag or "") or "none"
    return (f"*Scored with model **{made_by.model}** (weights {made_by.short_weights}, {made_by.app}); "
            f"tags `{tags}`; {len(scored.frame_deltas)} frame(s) scored. {setup_line(made_by)}*")


def scan_provenance(scan) -> str:
    made_by = scan.provenance
    tags = scan.prompt_text.split("<dna>")[0] or "none"
    return (f"*Scanned with model **{made_by.model}** (weights {made_by.short_weights}, {made_by.app}); "
            f"tags `{tags}`; {len(scan.frame_deltas)} frame(s) of {scan.frame_bases:,}-base windows; "
            f"{METHOD_WORDS[scan.method]}, "
            f"{delta_radius_words(scan.delta_radius).replace('the variant', 'each substitution')}. "
            f"{setup_line(made_by)}*")


def page_url(headers: dict) -> str | None:
    """The page a request came from (its Referer), trusted only when it is this server's own page: an http(s)
    address on the host the request was sent to; else None, and the link is made relative."""
    from urllib.parse import urlsplit

    referer, host = headers.get("referer") or "", headers.get("host") or ""
    parts = urlsplit(referer)
    return referer if parts.scheme in ("http", "https") and host and parts.netloc == host else None


def share_link(page_url: str | None, **query) -> str:
    """A link that opens the Variant tab on these inputs and scores them."""
    base = (page_url or "").split("?")[0].split("#")[0]
    url = f"{base}?{urlencode({k: v for k, v in query.items() if v not in (None, '')})}"
    return f"[Link to this result]({url}) (opens the page on these inputs and scores them)\n\n`{url}`"


#: The variant and its delta first, so a phone shows them without scrolling sideways; where it came from after.
VCF_TABLE_COLUMNS = ["pos", "ref", "alt", "delta", "more damaging than", "id", "chrom", "problem", "message", "line",
                     "window scored"]


def vcf_rows(rows: list[list[str]]) -> list[list]:
    """score-vcf's TSV rows (line, chrom, pos, id, ref, alt, delta, problem, message, rank, window start and end)
    as the page's table: numbers as numbers (so columns sort), in VCF_TABLE_COLUMNS order."""
    def number(text: str, kind=float):
        return kind(text) if text else None

    return [[number(r[2], int), r[4], r[5], number(r[6]), number(r[9]), r[3], r[1], r[7], r[8], number(r[0], int),
             f"{int(r[10]):,}–{int(r[11]):,}" if r[10] else ""] for r in rows]


def vcf_markdown(summary) -> str:
    """The summary's sentences as a list; they quote the VCF's own text (a malformed REF, a contig), so that is
    shown as text."""
    return "\n".join(f"- {plain(line)}" for line in summary.lines(PAGE_REMEDIES))


#: the VCF tab's own controls, named where a summary says how to fix what it found
PAGE_REMEDIES = Remedies(
    other_genome="choose it in the Genome list, or upload its FASTA under “Your own genome, contig names”",
    renaming="type the pairs in the “Contig names” box there: the VCF's name and the genome's, one pair "
             "a line")


#: genomes whose variants are human (a mammal, as the cards' groups name it)
HUMAN_GENOMES = ("GRCh", "hg1", "hg3", "CHM13", "T2T", "HBB-locus-demo")


def variant_group(species: str | None, genome: str | None = None) -> str | None:
    """The species group a variant's figures are read from: its species tag's key, else "mammal" for a
    human genome, else None (unknown: a pasted sequence with no tag)."""
    if species and species.strip().lower() not in ("", "none"):
        return species.strip().lower()
    if genome and genome.startswith(HUMAN_GENOMES):
        return "mammal"
    return None


def trust_note(bundle, spec, group: str | None = None) -> str:
    """How far this model's variant scores, read as `spec` says, can be trusted, from its own held-out
    measurements (of the spec's method where the model was measured with more than one): the variant's own
    species group's figures first where the card measured that group, the pooled ones beside; "as here"
    only when the spec is the measured one, else which settings differ."""
    quality = bundle.card.quality
    if not quality:
        return (f"*{bundle.name} ships no held-out variant-effect measurement; see its model card for "
                "published evaluations.*")
    method = spec.method
    figures = {quality_method(quality): quality, **quality.get("other_methods", {})}
    if method not in figures:
        return (f"*{bundle.name} was measured on held-out genes with the {METHOD_WORDS[quality_method(quality)]} "
                f"only, not with the {METHOD_WORDS[method]}: see its model card.*")
    measured = figures[method]
    demo = "a small **demo model**, " if quality.get("demo") else ""
    radius = quality_delta_radius(quality)
    whole = quality.get("whole_window") if method == quality_method(quality) else None
    differ = spec.differences(measured_spec(bundle)) if bundle.card.scoring.get("measured") else []
    setup = ("as here" if not differ else "not as here: this score's " + "; ".join(differ))
    groups = bundle.card.group_quality if method == quality_method(quality) else {}
    own = {task: groups.get(task, {}).get(group) for task in ("coding", "splice")} if group else {}
    own = own if own and all(value is not None for value in own.values()) else None  # the group's, when measured
    if own:
        figures_text = (f"for {group} variants such as this one, stop-gain vs synonymous AUROC {own['coding']:.2f} "
                        f"and splice site vs matched deep-intronic AUROC {own['splice']:.2f}; pooled over every "
                        f"group, {measured['stop_gain_vs_synonymous_auroc']:.2f} and "
                        f"{measured['splice_site_vs_deep_intronic_auroc']:.2f}")
    else:
        by_group = ", ".join(f"{g} {v:.2f}" for g, v in groups.get("coding", {}).items() if g != "all")
        figures_text = (f"stop-gain vs synonymous AUROC {measured['stop_gain_vs_synonymous_auroc']:.2f}"
                        + (f" (by group: {by_group})" if by_group else "")
                        + f", splice site vs matched deep-intronic AUROC "
                        f"{measured['splice_site_vs_deep_intronic_auroc']:.2f}")
    detail = (f"{bundle.name} is {demo}measured on held-out genes at "
              f"{quality['window']:,}-base windows with the {METHOD_WORDS[method]}"
              + ("" if radius is None else f", each delta {delta_radius_words(radius)}") + f" ({setup}): "
              + figures_text + " (1 = perfect, 0.5 = no signal, below 0.5 = pointing the wrong way)"
              + ("" if not whole else "; pooled and summed over the whole window, "
                 f"{whole['stop_gain_vs_synonymous_auroc']:.2f} and "
                 f"{whole['splice_site_vs_deep_intronic_auroc']:.2f}")
              + "."
              + (" These figures come from held-out genes of its own evaluation set; on independent data, such as "
                 "saturation-editing assays of human genes, a model this small can rank variants close to chance."
                 if quality.get("demo") else ""))
    # one breath first (what a person needs before reading the score), how it was measured folded below
    coding = own["coding"] if own else measured["stop_gain_vs_synonymous_auroc"]
    headline = (f"**How far to trust it:** {'a small demo model: ' if quality.get('demo') else ''}on held-out genes "
                f"it tells stop-gains from synonymous changes{f' among {group} variants' if own else ''} with AUROC "
                f"{coding:.2f} (1 = perfect, 0.5 = chance)"
                + (", read as here" if not differ else ", read otherwise than here")
                + (". Do not read its scores as evidence." if quality.get("demo") else "."))
    return f"{headline}\n\n<details><summary>How this was measured</summary>\n\n{detail}\n\n</details>"


def parameters(count: int) -> str:
    """5482752 -> '5.5M', 3012345678 -> '3.01B': how model sizes are written."""
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


def frame_words(r: dict) -> str:
    """The coding check in words: read in the frame the prompt's (or the design's own) ATG sets."""
    if r["coding_frame"] is None:
        return "not coding (no ATG start)"
    whose = frame_owner(r["coding_frame"], r.get("frame_start"))
    if r["in_frame_stops"]:
        where = ", ".join(f"{p:,}" for p in r["in_frame_stops"][:5]) + ("…" if len(r["in_frame_stops"]) > 5 else "")
        return f"**FAILS**: stop codon in frame at {where} (frame of {whose})"
    return f"open in the frame of {whose}"


def constraint_words(checks: list[dict]) -> str:
    """'all 4 PASS', or each failing specification by name."""
    if not checks:
        return "—"
    failed = [c for c in checks if not c["passes"]]
    if not failed:
        return f"all {len(checks)} PASS"
    return "; ".join(f"**FAIL** {c['specification']}: {c['detail']}" for c in failed)


def report_markdown(reports: list[dict]) -> str:
    """One row per design: its log-likelihood with its rank among the samples, its constraints and its checks,
    the columns a person decides on first (a wide table scrolls sideways from the right, on a phone at once)."""
    lines = ["| design | log-lik (rank) | constraints | mask | low complexity | length | GC | reading frame "
             "| longest ORF, any frame | ORF protein |", "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(reports, start=1):
        mask = "—" if r["mask_satisfied"] is None else ("satisfied" if r["mask_satisfied"] else "VIOLATED")
        orf = (f"{r['orf_length_aa']} aa, {r['orf_strand']} strand, {r['orf_start']}–{r['orf_end']}"
               if r["orf_start"] else "none")
        protein = r["orf_protein"][:40] + ("…" if len(r["orf_protein"]) > 40 else "")
        repeat = r.get("low_complexity")
        likelihood = "—" if r.get("total") is None else f"{r['total']:.2f} ({r['rank']} of {len(reports)})"
        if repeat and r.get("total") is not None:  # a likely design may be likely for its repeat
            likelihood += " ⚠ repeat"
        lines.append(f"| {i} | {likelihood} | {constraint_words(r.get('constraints', []))} | {mask} | "
                     f"{f'⚠ {repeat}' if repeat else 'none'} | {r['length']:,}/{r['expected_length']:,} | "
                     f"{100 * r['gc_content']:.1f}% | {frame_words(r)} | {orf} | `{protein}` |")
    flank = any(r.get("ll_flank") is not None for r in reports)
    lines.append("\nlog-lik: natural log of each design under the model, after its prompt"
                 + (" and with the downstream flank" if flank else "") + "; rank 1 = most likely. Low complexity: "
                 f"the longest tandem repeat (a unit of 1-6 bases) where it spans {LOW_COMPLEXITY_BASES} bases or "
                 "more; a language model finds repeats likely, so a repeat can rank a design high.")
    missing = next((r["ll_missing"] for r in reports if r.get("ll_missing")), None)
    if missing:
        lines.append(f"No log-likelihood: {html.escape(missing)}")
    return "\n".join(lines)


def timing_line(result, note: str = "") -> str:
    """How long a design took, and what the draft did."""
    line = f"{result.seconds:.2f} s, {result.bases_per_second:,.0f} bases/s ({result.n_tokens} tokens)"
    if result.speculative:
        s = result.speculative
        line += (f"; speculative decoding with {s.draft_model}: {100 * s.acceptance_rate:.0f}% "
                 f"of {s.proposed} proposed 6-mers accepted")
        if s.fallback_reason:
            line += f" ({s.fallback_reason})"
        elif s.estimated_speedup:
            line += f", about {s.estimated_speedup:.2f}x the target alone"
    return f"{line}; {note}" if note else line


def prompt_info(result) -> str:
    """The exact text and token ids the model read."""
    ids = " ".join(map(str, result.prompt_ids))
    return f"prompt text:\n{result.prompt_text}\n\ntoken ids ({len(result.prompt_ids)}):\n{ids}"


def track_rows(scored) -> list[list]:
    """The aligned tracks as table rows: reference position ('ins' for inserted bases), ref, alt, delta."""
    def rounded(value):
        return None if value is None else round(value, 4)

    return [[pos if pos is not None else "ins", rounded(r), rounded(a), rounded(d)] for pos, r, a, d in
            zip(scored.aligned_ref_pos, scored.aligned_ref_logprobs, scored.aligned_alt_logprobs,
                scored.aligned_delta, strict=True)]


def scan_summary(result, consequences=(), worst: int = 10) -> str:
    """How many substitutions were scored, where, the most damaging ones and, with a coding sequence, how
    each consequence class scores."""
    named = dict(zip(result.rows(), consequences, strict=False)) if consequences else {}
    rows = sorted(result.rows(), key=lambda row: row[3])[:worst]
    table = ("| substitution | delta | consequence |\n|---|---|---|\n" + "\n".join(
        f"| {ref}{pos}{alt} | {delta:+.4f} | {named[(pos, ref, alt, delta)] if named else '—'} |"
        for pos, ref, alt, delta in rows))
    text = (f"{len(result.rows()):,} substitutions scored, each in {result.frame_bases:,}-base windows "
            f"(six 6-mer frames) within {result.window_start:,}–{result.window_end:,}. Most negative (least "
            f"likely under the model):\n\n{table}")
    if named:
        by_kind: dict[str, list[float]] = {}
        for row, c in named.items():
            by_kind.setdefault(c.kind, []).append(row[3])
        text += ("\n\n| consequence | substitutions | median delta |\n|---|---|---|\n" + "\n".join(
            f"| {kind} | {len(by_kind[kind]):,} | {median(by_kind[kind]):+.4f} |" for kind in CLASSES
            if kind in by_kind))
    return text


#: how to serve the released checkpoints, as the Models tab's summary says it
CARBON_MODELS_HOWTO = (
    "**Carbon-500M, 3B and 8B** (HuggingFaceBio): start the app with `CARBON_MODEL=HuggingFaceBio/Carbon-3B` "
    "(or `CARBON_MODELS=HuggingFaceBio/Carbon-3B,HuggingFaceBio/Carbon-500M` for several; a local copy's folder "
    "works too). The weights (bf16: about 1, 6 and 16 GB) download on first start and need a GPU: 500M and 3B "
    "fit one 24 GB A10, 8B needs a larger one; 500M drafts for 3B and 8B (speculative decoding). For many "
    "users, serve them with vLLM and set `CARBON_SERVER` (README, \"A vLLM server as the backend\").")


def model_summary(name: str, config: dict, k: int, quality: dict | None, role: str | None) -> str:
    """What a model is, what it is good and not good for, its measured quality in one line, and how to run
    the released Carbon models: the few lines a person reads before the full card."""
    layers, hidden = config.get("num_hidden_layers"), config.get("hidden_size")
    context = int(config.get("max_position_embeddings") or 0)
    shape = (f"a Llama-style decoder over {k}-mer tokens ({layers} layers, width {hidden}), reading up to "
             f"{context:,} tokens ({context * k:,} bases) at once")
    if quality and quality.get("demo"):
        what = (f"**{plain(name)}** is a small demonstration model, {shape}, trained here on public genomes so "
                "that every tab works offline.")
        good = ("Good for: learning the tabs, trying designs, masks and constraints, and seeing how a variant "
                "score is read.")
        bad = "Not good for: biological conclusions; its scores and designs are far weaker than Carbon's."
    else:
        what = f"**{plain(name)}** is {shape}."
        good = ("Good for: designing DNA with species and region tags, and ranking variants by how much less "
                "likely the model finds the alternate sequence.")
        bad = ("Not good for: clinical decisions; a delta is a likelihood change under the model, not a measured "
               "effect.")
    if role == "draft":
        good += " It is also the draft of a larger model for speculative decoding."
    if quality:
        measured = (f"Measured on held-out genes: stop-gain vs synonymous AUROC "
                    f"{quality['stop_gain_vs_synonymous_auroc']:.2f}, splice site vs deep intronic AUROC "
                    f"{quality['splice_site_vs_deep_intronic_auroc']:.2f} (0.5 is chance; "
                    f"{METHOD_WORDS[quality_method(quality)]}, {quality.get('window', 0):,}-base windows).")
    else:
        measured = "It ships no held-out measurement of its own; Carbon's published figures are in its card."
    return "\n\n".join([what, f"{good} {bad}", measured, CARBON_MODELS_HOWTO])
