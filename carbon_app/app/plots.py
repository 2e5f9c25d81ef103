"""Plotly figures of engine results (plain data in, figures out; no Gradio here)."""

from __future__ import annotations

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..core.dna import BASES

#: one colour per base wherever bases are drawn: sequence text, bars, heatmap labels
BASE_COLOURS = {"A": "#1a7f37", "C": "#0b5cad", "G": "#b35900", "T": "#c4272d"}


def confidence_figure(base_probs: list[list[float]], base_entropy: list[list[float]], sequences: list[str],
                      offset: int = 0) -> go.Figure:
    """Per generated base: probability of the chosen base and the entropy (bits) it was drawn from."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("P(chosen base)", "entropy (bits)"))
    palette = plotly.colors.qualitative.Plotly
    for i, (probs, entropy, seq) in enumerate(zip(base_probs, base_entropy, sequences, strict=True)):
        x = np.arange(offset + 1, offset + len(probs) + 1)
        name = f"sample {i + 1}"
        hover = [f"position {p}: {b}" for p, b in zip(x, seq, strict=True)]
        line = dict(color=palette[i % len(palette)])  # a sample's colour in both panels, as the one legend says
        fig.add_trace(go.Scatter(x=x, y=probs, mode="lines", name=name, legendgroup=name, text=hover, line=line,
                                 hovertemplate="%{text}<br>P = %{y:.3f}<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=entropy, mode="lines", name=name, legendgroup=name, showlegend=False,
                                 text=hover, line=line, hovertemplate="%{text}<br>%{y:.2f} bits<extra></extra>"),
                      row=2, col=1)
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(range=[0, 2.05], row=2, col=1)
    fig.update_xaxes(title_text="generated base", row=2, col=1)
    fig.update_layout(height=420, margin=dict(l=50, r=20, t=40, b=40), hovermode="x unified")
    return fig


REF_GREY, ALT_RED = "#7f7f7f", "#d62728"
VIEW = 50  # bases either side of the variant in the default view; the range slider reaches the whole window


def variant_figure(score) -> go.Figure:
    """Reference (grey) and alternate (red) per-base log-probabilities overlaid on aligned columns, the delta
    as bars beneath, in the manner of AlphaGenome's variant tracks: opening on +/-50 bases around the
    variant with the bases as tick labels, a range slider for the whole window; an indel's missing bases
    are gaps in the allele that lacks them."""
    positions = score.aligned_ref_pos
    x = list(range(len(positions)))
    start = score.window_start
    bases = [score.ref_window[p - start] if p is not None and 0 <= p - start < len(score.ref_window) else "+"
             for p in positions]
    hover = [f"{b}{p:,}" if p is not None else "inserted" for b, p in zip(bases, positions, strict=True)]
    site = next((i for i, p in enumerate(positions) if p is not None and p >= score.variant.pos), 0)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06, row_heights=[0.62, 0.38],
                        subplot_titles=(f"log-probability per base, {score.variant}", "alt − ref"))
    fig.add_trace(go.Scatter(x=x, y=score.aligned_ref_logprobs, mode="lines", name="reference", text=hover,
                             line=dict(color=REF_GREY, width=2.5),
                             hovertemplate="%{text}<br>%{y:.3f}<extra>ref</extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=score.aligned_alt_logprobs, mode="lines", name="alternate", text=hover,
                             line=dict(color=ALT_RED, width=1.5), opacity=0.85,
                             hovertemplate="%{text}<br>%{y:.3f}<extra>alt</extra>"), row=1, col=1)
    deltas = [d if d is not None else 0.0 for d in score.aligned_delta]
    fig.add_trace(go.Bar(x=x, y=deltas, name="delta", text=hover, showlegend=False,
                         marker_color=[ALT_RED if d < 0 else "#1f77b4" for d in deltas],
                         hovertemplate="%{text}<br>%{y:+.3f}<extra>alt − ref</extra>"), row=2, col=1)
    for row in (1, 2):
        fig.add_vline(x=site, line_dash="dot", line_color="#444", line_width=1, row=row, col=1)
    view = [max(-0.5, site - VIEW - 0.5), min(len(x) - 0.5, site + VIEW + 0.5)]
    fig.update_xaxes(tickvals=x, ticktext=bases, tickfont=dict(size=9, family="monospace"), tickangle=0,
                     range=view, row=1, col=1)
    fig.update_xaxes(tickvals=x, ticktext=bases, tickfont=dict(size=9, family="monospace"), tickangle=0,
                     range=view, rangeslider=dict(visible=True, thickness=0.08), row=2, col=1,
                     title_text=f"bases of the window (drag the slider to see all {len(x):,} columns)")
    fig.update_layout(height=520, margin=dict(l=50, r=20, t=50, b=40), hovermode="x unified",
                      legend=dict(orientation="h", y=1.08, x=1, xanchor="right"))
    return fig


def site_figure(score) -> go.Figure:
    """A/C/G/T probabilities at the variant's first base, in the reference and alternate contexts, with the
    reference and alternate bases marked."""
    bases = list("ACGT")
    ref_base = score.variant.ref[0]
    alt_base = score.variant.alt[0] if len(score.variant.alt) == len(score.variant.ref) else None
    labels = [f"{b} (ref)" if b == ref_base else f"{b} (alt)" if b == alt_base else b for b in bases]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[score.site_probs_ref[b] for b in bases], name="reference context",
                         marker=dict(color=[BASE_COLOURS[b] for b in bases],
                                     line=dict(color=["#000" if b in (ref_base, alt_base) else "rgba(0,0,0,0)"
                                                      for b in bases], width=2))))
    fig.update_layout(height=260, margin=dict(l=40, r=20, t=40, b=30), yaxis=dict(range=[0, 1]),
                      title=dict(text=f"base probabilities at {score.variant.pos:,}", x=0.5, xanchor="center",
                                 automargin=True))  # centred: the panel's own label covers the top left
    return fig


def scan_figure(scan) -> go.Figure:
    """4 x L heatmap of delta log-likelihood, reference bases marked."""
    order = "ACGT"
    z = np.array([[scan.deltas[i, BASES.index(b)] for i in range(len(scan.region))] for b in order])
    x = list(range(scan.start, scan.end + 1))
    text = [[("ref " if scan.region[i] == b else "") + f"{scan.region[i]}{x[i]}{b}" for i in range(len(x))]
            for b in order]
    finite = np.abs(z[np.isfinite(z)])
    limit = float(finite.max()) if finite.size else 1.0
    fig = go.Figure(go.Heatmap(z=z, x=x, y=list(order), text=text, colorscale="RdBu", zmid=0, zmin=-limit,
                               zmax=limit, colorbar=dict(title="delta LL"),
                               hovertemplate="%{text}<br>delta %{z:.3f}<extra></extra>"))
    ref_y = [scan.region[i] for i in range(len(x))]
    fig.add_trace(go.Scatter(x=x, y=ref_y, mode="markers", marker=dict(symbol="square-open", size=9, color="black"),
                             name="reference base", hoverinfo="skip"))
    fig.update_layout(height=300, margin=dict(l=40, r=20, t=30, b=40), xaxis_title="position",
                      yaxis=dict(categoryorder="array", categoryarray=list(order)))
    return fig


#: consequence classes as saturation-editing studies colour them
CONSEQUENCE_COLOURS = {"synonymous": "#1a7f37", "missense": "#0b5cad", "stop-gain": "#c4272d",
                       "stop-loss": "#8e44ad", "start-loss": "#b35900", "non-coding": "#8c8c8c"}


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
                                 legendgroup=kind, marker=dict(color=colour, size=6),
                                 hovertemplate="%{text}<br>delta %{y:.3f}<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Box(y=deltas, name=kind, marker_color=colour, legendgroup=kind, showlegend=False,
                             boxpoints=False), row=1, col=2)
    fig.update_xaxes(title_text="position", row=1, col=1)
    fig.update_yaxes(title_text="delta LL", row=1, col=1)
    fig.update_layout(height=340, margin=dict(l=50, r=20, t=40, b=40))
    return fig


def vcf_figure(rows: list[list[str]]) -> go.Figure:
    """A VCF's deltas along each contig (from the TSV rows: line, chrom, pos, id, ref, alt, delta, ...)."""
    fig = go.Figure()
    scored = [r for r in rows if len(r) > 6 and r[6]]
    for contig in dict.fromkeys(r[1] for r in scored):
        these = [r for r in scored if r[1] == contig]
        fig.add_trace(go.Scatter(
            x=[int(r[2]) for r in these], y=[float(r[6]) for r in these], mode="markers", name=contig,
            text=[f"{r[1]}:{r[2]} {r[4]}>{r[5]} {r[3] if r[3] != '.' else ''}" for r in these],
            hovertemplate="%{text}<br>delta %{y:.3f}<extra></extra>"))
    fig.add_hline(y=0, line_color="#999", line_width=1)
    fig.update_layout(height=320, margin=dict(l=50, r=20, t=40, b=40), xaxis_title="position on the contig",
                      yaxis_title="delta LL")
    return fig


LOGO_BASES = 120  # positions a logo shows: enough to read, few enough to stay legible


def logo_figure(marginals, first: int = 1, title: str = "design 1"):
    """A probability logo of per-base distributions [L, 4] (A T C G), as biologists read them: each column's
    letters stacked to 1, the likeliest on top (a bits logo flattens a small model's near-uniform columns to
    nothing); drawn by logomaker (matplotlib)."""
    import logomaker
    import pandas as pd
    from matplotlib.figure import Figure

    shown = np.asarray(marginals, dtype=float)[:LOGO_BASES]
    frame = pd.DataFrame(shown, columns=list(BASES), index=range(first, first + len(shown)))
    # a figure pyplot does not manage: each of the ~500 glyphs would otherwise ask pyplot whether to redraw
    fig = Figure(figsize=(max(6.0, len(shown) * 0.14), 2.2))
    ax = fig.subplots()
    logomaker.Logo(frame, ax=ax, color_scheme={b: BASE_COLOURS[b] for b in BASES}, font_name="DejaVu Sans Mono")
    ax.set_ylim(0, 1)
    ax.set_ylabel("probability")
    more = f" (first {LOGO_BASES} of {len(marginals):,} bases)" if len(marginals) > LOGO_BASES else ""
    ax.set_title(f"{title}: what the model allowed at each base{more}", fontsize=9)
    fig.tight_layout()
    return fig
