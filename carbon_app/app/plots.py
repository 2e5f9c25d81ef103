"""Plotly figures of engine results (plain data in, figures out; no Gradio here)."""

from __future__ import annotations

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..core.dna import BASES

#: one colour per base wherever bases are drawn: sequence text, bars, heatmap labels
BASE_COLOURS = {"A": "#1a7f37", "C": "#0b5cad", "G": "#b35900", "T": "#c4272d"}


#: designs drawn each as its own line in the confidence plot; past that, every design as a median and a band
#: (64 lines are a tangle, and 64 x 1,500 points in two panels were 7.7 MB for the page to draw)
LINES_DRAWN = 8


def confidence_figure(base_probs: list[list[float]], base_entropy: list[list[float]], sequences: list[str],
                      offset: int = 0) -> go.Figure:
    """Per generated base: probability of the chosen base and the entropy (bits) it was drawn from; the first
    LINES_DRAWN designs a line each, and where there are more, all of them as their median and 10-90% band."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("P(chosen base)", "entropy (bits)"))
    palette = plotly.colors.qualitative.Plotly
    panels = ((1, base_probs, "P = %{y:.3f}"), (2, base_entropy, "%{y:.2f} bits"))
    for i, seq in enumerate(sequences[:LINES_DRAWN]):
        x = np.arange(offset + 1, offset + len(seq) + 1)
        name = f"sample {i + 1}"
        hover = [f"position {p}: {b}" for p, b in zip(x, seq, strict=True)]
        line = dict(color=palette[i % len(palette)])  # a sample's colour in both panels, as the one legend says
        for row, values, shown in panels:
            fig.add_trace(go.Scatter(x=x, y=np.round(values[i], 4), mode="lines", name=name, legendgroup=name,
                                     showlegend=row == 1, text=hover, line=line,
                                     hovertemplate=f"%{{text}}<br>{shown}<extra></extra>"), row=row, col=1)
    if len(sequences) > LINES_DRAWN:
        _all_designs_band(fig, panels, offset, len(sequences))
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(range=[0, 2.05], row=2, col=1)
    fig.update_xaxes(title_text="generated base", row=2, col=1)
    fig.update_layout(height=420, margin=dict(l=50, r=20, t=40, b=40), hovermode="x unified")
    return fig


def _all_designs_band(fig: go.Figure, panels, offset: int, samples: int) -> None:
    """Every design at each position, as the median (a dark line) and the 10-90% band (grey) across them
    (a design that ends early counts where it reaches)."""
    length = max(len(values) for values in panels[0][1])
    x = np.arange(offset + 1, offset + length + 1)
    name = f"all {samples} designs"
    for row, values, shown in panels:
        padded = np.full((len(values), length), np.nan)
        for i, design in enumerate(values):
            padded[i, :len(design)] = design
        low, median, high = np.round(np.nanpercentile(padded, [10, 50, 90], axis=0), 4)
        fig.add_trace(go.Scatter(x=x, y=high, mode="lines", line=dict(width=0), legendgroup=name, showlegend=False,
                                 hoverinfo="skip"), row=row, col=1)
        fig.add_trace(go.Scatter(x=x, y=low, mode="lines", line=dict(width=0), fill="tonexty",
                                 fillcolor="rgba(120,120,120,0.25)", name=f"{name}: 10-90%", legendgroup=name,
                                 showlegend=row == 1, hoverinfo="skip"), row=row, col=1)
        fig.add_trace(go.Scatter(x=x, y=median, mode="lines", line=dict(color="#333", width=1.5, dash="dot"),
                                 name=f"{name}: median", legendgroup=name, showlegend=row == 1,
                                 hovertemplate=f"median of all {samples}: {shown}<extra></extra>"), row=row, col=1)


REF_GREY, ALT_RED = "#7f7f7f", "#d62728"
VIEW = 50  # bases either side of the variant in the default view; the range slider reaches the whole window


def variant_figure(score) -> go.Figure:
    """Reference (grey, solid) and alternate (red, dashed) per-base log-probabilities on aligned columns, the
    delta (alt - ref) as bars beneath, in the manner of AlphaGenome's variant tracks: the x axis in sequence
    positions, the bases the delta sums shaded (its radius either side of the REF allele), opening on +/-50
    bases around the variant with a range slider for the whole window; an indel's missing bases are gaps in
    the allele that lacks them, its inserted ones drawn between their neighbours."""
    positions = score.aligned_ref_pos
    x = _column_positions(positions)
    start = score.window_start
    bases = [score.ref_window[p - start] if p is not None and 0 <= p - start < len(score.ref_window) else "+"
             for p in positions]
    hover = [f"{b} {p:,}" if p is not None else "inserted" for b, p in zip(bases, positions, strict=True)]
    site = score.variant.pos
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.62, 0.38],
                        subplot_titles=("log-probability per base", "alt − ref"))
    fig.add_trace(go.Scatter(x=x, y=score.aligned_ref_logprobs, mode="lines", name="reference", text=hover,
                             line=dict(color=REF_GREY, width=2.5),
                             hovertemplate="%{text}<br>%{y:.3f}<extra>ref</extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=score.aligned_alt_logprobs, mode="lines", name="alternate", text=hover,
                             line=dict(color=ALT_RED, width=1.8, dash="dash"),
                             hovertemplate="%{text}<br>%{y:.3f}<extra>alt</extra>"), row=1, col=1)
    deltas = [d if d is not None else 0.0 for d in score.aligned_delta]
    fig.add_trace(go.Bar(x=x, y=deltas, name="delta", text=hover, showlegend=False, textposition="none",
                         marker_color=[ALT_RED if d < 0 else "#1f77b4" for d in deltas],
                         hovertemplate="%{text}<br>%{y:+.3f}<extra>alt − ref</extra>"), row=2, col=1)
    radius = score.delta_radius
    if radius is not None:  # the bases the delta sums
        for row in (1, 2):
            fig.add_vrect(x0=score.touched_start - radius - 0.5, x1=score.touched_end + radius + 0.5,
                          fillcolor="#f2c14e", opacity=0.18, line_width=0, row=row, col=1)
    for row in (1, 2):
        fig.add_vline(x=site, line_dash="dot", line_color="#444", line_width=1, row=row, col=1)
    view = [max(x[0], site - VIEW) - 0.5, min(x[-1], site + VIEW) + 0.5]
    summed = ("the shaded bases are those the delta sums" if radius is not None
              else "the delta sums the whole window")
    fig.update_xaxes(range=view, tickformat=",d", row=1, col=1)
    fig.update_yaxes(title_text="log P (nats)", row=1, col=1)
    fig.update_yaxes(title_text="Δ (nats)", row=2, col=1)
    fig.update_xaxes(range=view, tickformat=",d", rangeslider=dict(visible=True, thickness=0.08), row=2, col=1,
                     title_text=f"position ({summed}; drag the slider to see all {len(x):,} columns)")
    fig.update_layout(height=540, margin=dict(l=50, r=20, t=40, b=40), hovermode="x unified",
                      title=dict(text=f"{score.variant}", x=0.01, y=0.99, font=dict(size=13)),
                      legend=dict(orientation="h", y=-0.32, x=0, xanchor="left"))  # below: clear of the titles
    return fig


def _column_positions(positions: list[int | None]) -> list[float]:
    """An x for each aligned column: its sequence position, an inserted base's spread between its
    neighbours (the first inserted base of three after 100 at 100.25, then 100.5, 100.75)."""
    x: list[float] = []
    i = 0
    while i < len(positions):
        if positions[i] is not None:
            x.append(float(positions[i]))
            i += 1
            continue
        run = i
        while run < len(positions) and positions[run] is None:
            run += 1
        before = x[-1] if x else float(next((p for p in positions[run:] if p is not None), 1)) - 1
        x += [before + (j + 1) / (run - i + 1) for j in range(run - i)]
        i = run
    return x


def site_figure(score) -> go.Figure:
    """A/C/G/T probabilities at the variant's first base in the reference context (solid) and the
    alternate's (hatched), each bar labelled with its value, the reference and alternate bases named. Where
    the two are the same (a substitution: a causal model reads only the bases before the site, which the
    two contexts share) one set of bars says so, instead of two identical ones."""
    bases = list("ACGT")
    ref_base = score.variant.ref[0]
    alt_base = score.variant.alt[0] if len(score.variant.alt) == len(score.variant.ref) else None
    labels = [f"{b} (ref)" if b == ref_base else f"{b} (alt)" if b == alt_base else b for b in bases]
    fig = go.Figure()
    contexts = [("reference context", score.site_probs_ref, ""), ("alternate context", score.site_probs_alt, "/")]
    if max(abs(score.site_probs_ref[b] - score.site_probs_alt[b]) for b in bases) < 1e-9:
        contexts = [("either context (the same: the model reads only the bases before the site)",
                     score.site_probs_ref, "")]
    for name, probs, pattern in contexts:
        values = [probs[b] for b in bases]
        fig.add_trace(go.Bar(x=labels, y=values, name=name, text=[f"{v:.2f}" for v in values],
                             textposition="outside", cliponaxis=False,
                             marker=dict(color=[BASE_COLOURS[b] for b in bases], pattern_shape=pattern,
                                         opacity=1.0 if not pattern else 0.6)))
    fig.update_layout(height=300, margin=dict(l=40, r=20, t=40, b=30), barmode="group",
                      yaxis=dict(range=[0, 1.1], title="probability"),
                      legend=dict(orientation="h", y=-0.18, x=0), showlegend=True,
                      title=dict(text=f"base probabilities at {score.variant.pos:,}", x=0.5, xanchor="center",
                                 automargin=True))  # centred: the panel's own label covers the top left
    return fig


SCAN_VIEW = 100  # positions the scan's heatmap opens on: columns a person can read, on a phone too


def scan_figure(scan) -> go.Figure:
    """4 x L heatmap of delta log-likelihood, reference bases marked; a region longer than SCAN_VIEW opens on
    its first SCAN_VIEW positions, with a range slider for the rest."""
    order = "ACGT"
    z = np.array([[scan.deltas[i, BASES.index(b)] for i in range(len(scan.region))] for b in order])
    x = list(range(scan.start, scan.end + 1))
    text = [[("ref " if scan.region[i] == b else "") + f"{scan.region[i]}{x[i]}{b}" for i in range(len(x))]
            for b in order]
    finite = np.abs(z[np.isfinite(z)])
    limit = float(finite.max()) if finite.size else 1.0
    fig = go.Figure(go.Heatmap(z=z, x=x, y=list(order), text=text, colorscale="RdBu", zmid=0, zmin=-limit,
                               zmax=limit, colorbar=dict(title="delta LL (nats)"),
                               hovertemplate="%{text}<br>delta %{z:.3f}<extra></extra>"))
    ref_y = [scan.region[i] for i in range(len(x))]
    fig.add_trace(go.Scatter(x=x, y=ref_y, mode="markers", marker=dict(symbol="square-open", size=9, color="black"),
                             name="the reference base (no substitution)", hoverinfo="skip", showlegend=True))
    fig.update_layout(height=320, margin=dict(l=40, r=20, t=30, b=60), xaxis_title="position",
                      yaxis=dict(categoryorder="array", categoryarray=list(order), title="base it becomes"),
                      legend=dict(orientation="h", y=-0.3, x=0))
    if len(x) > SCAN_VIEW:  # a long region opens on its first positions, readable; the slider reaches the rest
        fig.update_layout(height=380, legend=dict(y=-0.55),
                          xaxis=dict(range=[x[0] - 0.5, x[0] + SCAN_VIEW - 0.5], rangeslider=dict(visible=True,
                                                                                                 thickness=0.08)))
    return fig


#: consequence classes as saturation-editing studies colour them
CONSEQUENCE_COLOURS = {"synonymous": "#1a7f37", "missense": "#0b5cad", "stop-gain": "#c4272d",
                       "stop-loss": "#8e44ad", "start-loss": "#b35900", "non-coding": "#8c8c8c"}
#: A shape for each consequence beside its colour, so the marks read without telling colours apart.
CONSEQUENCE_SYMBOLS = {"synonymous": "circle", "missense": "diamond", "stop-gain": "x", "stop-loss": "triangle-up",
                       "start-loss": "triangle-down", "non-coding": "circle-open"}


def consequence_figure(scan, consequences) -> go.Figure:
    """Every substitution's delta along the region, coloured by its consequence, beside the distribution of each
    class (a saturation-editing study's two standard views)."""
    rows = scan.rows()
    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=("delta by position", "by consequence"))
    for kind, colour in CONSEQUENCE_COLOURS.items():
        picked = [(row, c) for row, c in zip(rows, consequences, strict=True) if c.kind == kind]
        if not picked:
            continue
        text = [f"{ref}{pos}{alt} {c.protein_change}".strip() for (pos, ref, alt, _), c in picked]
        deltas = [row[3] for row, _ in picked]
        fig.add_trace(go.Scatter(x=[row[0] for row, _ in picked], y=deltas, mode="markers", name=kind, text=text,
                                 legendgroup=kind, marker=dict(color=colour, size=7, symbol=CONSEQUENCE_SYMBOLS[kind]),
                                 hovertemplate="%{text}<br>delta %{y:.3f}<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Box(y=deltas, name=kind, marker_color=colour, legendgroup=kind, showlegend=False,
                             boxpoints=False), row=1, col=2)
    fig.update_xaxes(title_text="position", row=1, col=1)
    fig.update_yaxes(title_text="delta LL (nats)", row=1, col=1)
    fig.update_layout(height=340, margin=dict(l=50, r=20, t=40, b=40),
                      legend=dict(title_text="consequence (each a colour and a shape)"))
    return fig


def vcf_figure(rows: list[list[str]]) -> go.Figure | None:
    """A VCF's deltas along each contig (from the TSV rows: line, chrom, pos, id, ref, alt, delta, ...); None
    when no ALT allele was scored (an empty plot would look like a result)."""
    scored = [r for r in rows if len(r) > 6 and r[6]]
    if not scored:
        return None
    fig = go.Figure()
    for contig in dict.fromkeys(r[1] for r in scored):
        these = [r for r in scored if r[1] == contig]
        fig.add_trace(go.Scatter(
            x=[int(r[2]) for r in these], y=[float(r[6]) for r in these], mode="markers", name=contig,
            text=[f"{r[1]}:{r[2]} {r[4]}>{r[5]} {r[3] if r[3] != '.' else ''}" for r in these],
            hovertemplate="%{text}<br>delta %{y:.3f}<extra></extra>"))
    fig.add_hline(y=0, line_color="#999", line_width=1)
    fig.update_layout(height=320, margin=dict(l=50, r=20, t=40, b=40), xaxis_title="position on the contig",
                      yaxis_title="delta LL (nats)")
    return fig


LOGO_VIEW = 100  # positions the logo opens on; its range slider reaches the whole design


def logo_figure(marginals, first: int = 1, title: str = "design 1") -> go.Figure:
    """An information-content logo of per-base distributions [L, 4] (A T C G) over the whole design: each
    column as tall as its information (2 - entropy, bits), its letters stacked by probability, the likeliest
    on top, each letter sized to its share (drawn by the browser, so a 600-base design costs nothing here:
    matplotlib's glyphs took seconds per hundred bases). Opens on the first LOGO_VIEW bases; the range slider
    scrolls the rest."""
    probs = np.clip(np.asarray(marginals, dtype=float), 0.0, 1.0)
    probs = probs / probs.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.nansum(np.where(probs > 0, probs * np.log2(probs), 0.0), axis=1)
    bits = np.clip(2.0 - entropy, 0.0, 2.0)
    heights = probs * bits[:, None]  # [L, 4]
    x = np.arange(first, first + len(probs))
    order = np.argsort(heights, axis=1)  # least likely first: stacked at the bottom
    letters = np.array(list(BASES))
    fig = go.Figure()
    for rank in range(4):
        which = order[:, rank]
        chosen = letters[which]
        height = heights[np.arange(len(probs)), which]
        fig.add_trace(go.Bar(
            x=x, y=height, text=chosen, textposition="inside", insidetextanchor="middle", showlegend=False,
            textfont=dict(family="DejaVu Sans Mono, monospace", size=28, color="white"),
            marker=dict(color=[BASE_COLOURS[b] for b in chosen], line_width=0),
            customdata=np.stack([probs[np.arange(len(probs)), which], bits], axis=1),
            hovertemplate="position %{x}: %{text}, P %{customdata[0]:.2f} (column %{customdata[1]:.2f} bits)"
                          "<extra></extra>"))
    fig.update_layout(barmode="stack", bargap=0.02, height=260, margin=dict(l=50, r=20, t=40, b=40),
                      title=dict(text=f"{title}: information (bits) at each base, letters by probability",
                                 x=0.01, font=dict(size=13)),
                      yaxis=dict(range=[0, 2], title="bits"),
                      xaxis=dict(range=[first - 0.5, first + min(LOGO_VIEW, len(probs)) - 0.5], tickformat=",d",
                                 rangeslider=dict(visible=len(probs) > LOGO_VIEW, thickness=0.1),
                                 title="generated base"))
    return fig
