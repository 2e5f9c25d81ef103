"""Models: what is loaded, where and in what memory; draft pairing; each model's card."""

from __future__ import annotations

import gradio as gr

from .. import formatting as fmt
from ..model_thread import on_model_thread
from .common import FREE, Page, guarded


def models_tab(page: Page, demo: gr.Blocks) -> None:
    service = page.service
    models = page.models
    manager = service.manager
    summary = gr.Markdown()  # what the chosen model is and is good for, before the details below
    if service.config.server:
        gr.Markdown(f"Forward passes run on the server **{fmt.plain(service.config.server)}** (CARBON_SERVER): "
                    "every score, scan, context and VCF batch goes there, and so do designs without constraints "
                    "(constraints step back from dead ends, which a server's sampler cannot: they are refused "
                    "here, naming why).")
    gr.Markdown(f"Device: **{manager.device}**, dtype **{str(manager.dtype)[6:]}**, memory budget "
                f"**{manager.memory_budget_bytes / 2**30:.1f} GiB**. Models are chosen by the server (CARBON_MODEL / "
                "CARBON_MODELS), never by a path typed here; genomes too (CARBON_REFERENCES): "
                f"{', '.join(page.genomes) or 'none'}.")
    with gr.Row():
        chosen = gr.Dropdown(service.served_models(), value=models[0] if models else None, **FREE, label="Model")
        load_button = gr.Button("Load")
        unload_button = gr.Button("Unload")
        refresh = gr.Button("Refresh")
    table = gr.Dataframe(headers=["name", "device", "dtype", "head dtype", "memory", "parameters", "context (bases)",
                                  "draft", "forward"], label="Loaded models")
    pairing = gr.Markdown()
    status = gr.JSON(visible=False)
    with gr.Accordion("The full model card", open=False):
        card = gr.Markdown()

    @guarded
    def models_info():
        # server paths stay on the server (and a "path" key would read as a file to gradio_client)
        loaded = [{k: v for k, v in m.items() if k != "path"} for m in manager.loaded()]
        rows = [[m["name"], m["device"], m["dtype"], m["head_dtype"], f"{m['memory_bytes'] / 2**20:,.1f} MB",
                 fmt.parameters(m["parameters"]), f"{m['context_bases']:,}", m["draft"] or "", m["forward"]]
                for m in loaded]
        pairs = "\n".join(f"- **{m}** drafts with **{manager.draft_for(m) or 'none'}**" for m in models)
        return rows, pairs or "No models configured.", {
            "configured": models, "loaded": loaded, "requests_running": service.running,
            "requests_stopped_early": service.stopped,
            "memory_budget_bytes": manager.memory_budget_bytes, "memory_free_bytes": manager.free_bytes(),
            "server": service.server_status(), "notice": service.config.notice}

    @guarded
    def model_card(name):
        return service.model_card(name)

    @guarded
    def model_summary(name):
        return fmt.model_summary(**service.model_facts(name))

    @on_model_thread
    @guarded
    def load(name):
        service.model(name)
        return models_info()

    @on_model_thread
    @guarded
    def unload(name):
        service.unload(name)
        return models_info()

    shown = [table, pairing, status]
    # a status read, answered at once even while a long request holds the GPU
    refresh.click(models_info, None, shown, api_name="models", queue=False)
    load_button.click(load, chosen, shown, api_name="load_model", **page.model_queue).then(
        model_card, chosen, card, api_name="model_card")
    unload_button.click(unload, chosen, shown, api_name="unload_model", **page.model_queue)
    chosen.change(model_card, chosen, card, api_visibility="private")
    chosen.change(model_summary, chosen, summary, api_visibility="private")
    demo.load(models_info, None, shown, api_visibility="private")
    demo.load(model_card, chosen, card, api_visibility="private")  # the card on first view too
    demo.load(model_summary, chosen, summary, api_name="model_summary")
