"""Carbon Studio web app (Hugging Face Space entry point).

A first, minimal interface over the engine: design (generation) and variant
scoring. Set CARBON_MODEL to a hub id or local model directory; without it
the bundled demo model is used once the project ships one.
"""

from __future__ import annotations

import gradio as gr

from carbon_app.errors import CarbonError
from carbon_app.generate import generate
from carbon_app.models import ModelManager
from carbon_app.score import score_variant

MANAGER = ModelManager()


def design(prompt, n_bases, mask, species, region, mode, temperature, seed):
    try:
        result = generate(MANAGER.get(), prompt, int(n_bases), mask=mask or None, species=species,
                          region=region, mode=mode, temperature=float(temperature), seed=int(seed))
    except CarbonError as exc:
        raise gr.Error(str(exc)) from None
    return result.sequences[0], result.prompt_text, " ".join(map(str, result.prompt_ids))


def variant(reference, change, window, strand_average):
    try:
        scored = score_variant(MANAGER.get(), reference, change, int(window), bool(strand_average))
    except CarbonError as exc:
        raise gr.Error(str(exc)) from None
    sign = "less" if scored.delta < 0 else "more"
    return (f"delta = LL(alt) - LL(ref) = {scored.delta:+.4f}: the alternate is {sign} likely than the "
            f"reference under the model (window {scored.window_start}-{scored.window_end}). "
            "Research use, not a clinical call.")


def build_app() -> gr.Blocks:
    with gr.Blocks(title="Carbon Studio") as demo:
        gr.Markdown("# Carbon Studio\nDesign and score DNA with the Carbon DNA language models.")
        with gr.Tab("Design"):
            prompt = gr.Textbox(label="DNA prompt", value="ATGGCC")
            with gr.Row():
                n_bases = gr.Number(label="Bases", value=60, precision=0)
                mask = gr.Textbox(label="IUPAC mask (optional)")
                species = gr.Dropdown(["none", "mammal", "vertebrate", "invertebrate", "plant", "fungus",
                                       "protozoa"], value="none", label="Species")
                region = gr.Dropdown(["none", "protein_coding", "pseudogene", "trna", "tmrna", "ncrna",
                                      "misc_rna", "rrna"], value="none", label="Region")
            with gr.Row():
                mode = gr.Radio(["bp", "token"], value="bp", label="Mode")
                temperature = gr.Slider(0, 2, value=0.9, step=0.05, label="Temperature (0 = greedy)")
                seed = gr.Number(label="Seed", value=0, precision=0)
            run = gr.Button("Generate", variant="primary")
            sequence = gr.Textbox(label="Generated bases")
            prompt_text = gr.Textbox(label="Prompt text sent")
            prompt_ids = gr.Textbox(label="Prompt token ids")
            run.click(design, [prompt, n_bases, mask, species, region, mode, temperature, seed],
                      [sequence, prompt_text, prompt_ids], api_name="generate")
        with gr.Tab("Variant"):
            reference = gr.Textbox(label="Reference sequence", lines=4)
            change = gr.Textbox(label="Variant (POS:REF>ALT, 1-based)", value="")
            with gr.Row():
                window = gr.Number(label="Window (bases)", value=8000, precision=0)
                strand = gr.Checkbox(label="Average with the reverse strand")
            score = gr.Button("Score", variant="primary")
            verdict = gr.Markdown()
            score.click(variant, [reference, change, window, strand], verdict, api_name="score_variant")
    return demo


if __name__ == "__main__":
    build_app().queue(max_size=32).launch(server_name="0.0.0.0", server_port=7860)
