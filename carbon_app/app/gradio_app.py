"""Carbon Studio: the Blocks app. The page is the model choice over five tabs; each tab
(`tabs/`) lays itself out and wires its own thin handlers.

Every event that runs a model is in one concurrency group ("model"), so the tabs share
one queue: one request at a time on a model in this process, up to CARBON_SERVER_CONCURRENCY
with an inference server (`Page.model_queue`); every event has an `api_name` for
`gradio_client`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder
from starlette.middleware import Middleware

from .. import settings
from ..assets import ASSETS
from ..core import stopping
from ..errors import InputError
from ..model.manager import ModelManager
from . import formatting as fmt
from . import model_thread
from .admission import Admission, Door, UploadBudget, model_jobs
from .cache_folder import own_cache_folder
from .service import MAX_UPLOAD_BYTES, AppConfig, Service
from .sign_in import HideApiSignedOut, sign_ins
from .tabs.common import FREE, Page, guarded
from .tabs.design import design_tab
from .tabs.models import models_tab
from .tabs.scan import scan_tab
from .tabs.variant import variant_tab
from .tabs.vcf import vcf_tab

log = logging.getLogger("carbon_app")

#: A wide table scrolls sideways (on a 400-px phone) instead of squeezing each column to a letter, and a long
#: one scrolls in its own box with its header kept in view, as the Dataframe tables do.
CSS = """
.carbon-table table { display: block; overflow: auto; white-space: nowrap; max-height: 480px; padding: 0; }
.carbon-table thead th { position: sticky; top: 0; z-index: 1; background: var(--table-even-background-fill); }
/* the row's name (a design's number, a variant's id) stays in view while the table scrolls sideways */
.carbon-table th:first-child, .carbon-table td:first-child { position: sticky; left: 0;
                                                             background: var(--table-even-background-fill); }
.carbon-table thead th:first-child { z-index: 2; }
.carbon-seq { font-family: ui-monospace, monospace; white-space: pre; overflow-x: auto; margin: 0.4em 0;
              line-height: 1.45; }
.carbon-ruler { color: #888; user-select: none; }
.carbon-progress { min-height: 3.2em; }  /* an empty line that holds a progress bar, clear of the results */
.carbon-prompt { font-family: ui-monospace, monospace; color: #999; overflow-x: auto; white-space: nowrap; }
/* a phone: the tabs small enough that all five fit one row at 400 px (they wrap to a second row below that) */
@media (max-width: 640px) {
  .tab-wrapper .tab-container button { padding: 0 4px !important; font-size: 12px !important;
                                       letter-spacing: -0.01em; }
  .carbon-seq { white-space: pre-wrap; }  /* a line wraps between its groups of ten, every base on screen */
  /* a plot along a region (the scan's heatmap, its consequences) keeps a readable width and scrolls sideways in
     its own box: 90 positions squeezed into a phone were 2-pixel columns */
  .carbon-wide-plot { overflow-x: auto !important; }
  .carbon-wide-plot .js-plotly-plot, .carbon-wide-plot .plot-container { min-width: 880px; }
}
""" + fmt.BASE_CSS

#: A dropdown's list closes when the focus leaves it (Gradio's stayed open after Tab, over what came next, the
#: tabs included, and each dropdown tabbed through opened one more): leaving, it is told Escape, which closes it.
PAGE_JS = """
() => {
  document.addEventListener('focusout', (event) => {
    const field = event.target;
    if (field instanceof HTMLElement && field.getAttribute('role') === 'combobox') {
      field.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', bubbles: true}));
    }
  }, true);
}
"""

#: One font family, the system's (a web font's 5 KB semibold subset made bold text fall back letter by letter),
#: and colours that meet WCAG AA for text (4.5:1): helper text and placeholders were #BBBBC2 on white (1.9:1),
#: white on the orange Generate button 2.8:1, on the red Stop button 3.8:1.
SYSTEM_FONT = ["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica", "Arial",
               "sans-serif"]
SYSTEM_MONO = ["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "Liberation Mono", "monospace"]


def page_theme() -> gr.themes.Base:
    return gr.themes.Default(font=SYSTEM_FONT, font_mono=SYSTEM_MONO).set(
        body_text_color_subdued="#5b5e6b",  # 6.4:1 on white
        block_info_text_color="#5b5e6b",
        input_placeholder_color="#6b7280",  # 4.8:1
        button_primary_background_fill="#c2410c",  # white on it 5.2:1
        button_primary_background_fill_hover="#9a3412",
        button_primary_text_color="#ffffff",
        button_cancel_background_fill="#b91c1c",  # white on it 6.5:1
        button_cancel_background_fill_hover="#991b1b",
        button_cancel_text_color="#ffffff",
    )


def build_app(manager: ModelManager | None = None, config: AppConfig | None = None,
              service: Service | None = None) -> gr.Blocks:
    service = service or Service(manager or ModelManager(), config or AppConfig.from_env())
    models = service.config.models
    examples, hbb = Page.load_examples()
    # uploads and Gradio's copies of served files: cleared hourly once older than the results' retention age
    age = max(1, int(service.config.retention.max_age_s))
    # analytics off: Gradio's default sends a version check and usage reports to its own servers from every
    # deployment; a self-hosted server talks to its model server and the hub only (where the outside is
    # unreachable, each report also held the process ~20 s at its exit, waiting on DNS)
    with gr.Blocks(title="Carbon Studio", delete_cache=(min(3600, age), age), analytics_enabled=False) as demo:
        gr.Markdown("# Carbon Studio\nDesign DNA and score variants with the Carbon DNA language models "
                    "(6-mer tokens, base-level inference).")
        if service.config.notice:
            gr.Markdown(f"⚠️ {fmt.plain(service.config.notice)}", elem_id="carbon-notice")
        with gr.Row():
            # choice fields take any value and the service or engine names a wrong one: a widget's own
            # check ("Value: x is not in the list of choices") would log a traceback and name no field
            model = gr.Dropdown(models, value=models[0] if models else None, label="Model", **FREE)
        page = Page(service, model, examples, hbb)
        # every tab stays on the bar, a second row where a phone is narrow: Gradio's default hides the ones that
        # do not fit behind a "more" menu, by measuring the buttons, which a 360-px phone (or a wider font) tips
        with gr.Tabs(overflow_behavior="wrap") as tabs:
            with gr.Tab("Design", id="design"):
                design_tab(page)
            with gr.Tab("Variant", id="variant"):
                variant_tab(page, tabs, demo)
            with gr.Tab("VCF batch", id="vcf"):
                vcf_tab(page)
            with gr.Tab("Mutation scan", id="scan"):
                scan_tab(page)
            with gr.Tab("Models", id="models"):
                models_tab(page, demo)

        @guarded
        def model_dropdowns(name):
            """A model's own tags and scoring setup: choosing another model offers its tags (a design's back at
            none) and reads its scores the way its quality was measured. A name this server does not serve is
            refused before anything is looked up (`Service.served`)."""
            return page.own_scoring(name)

        model.change(model_dropdowns, model, page.setup_fields, api_visibility="private", queue=False)
    return demo


#: Of a shutdown's grace, the seconds kept for its last steps: jobs still running stop at their next checkpoint
#: (a batch: seconds, more on a loaded host), then the queue's jobs are answered (`stop_on_sigterm`).
STOP_AT_ONCE_S, ANSWER_QUEUE_S = 6.0, 3.0


def stop_on_sigterm(grace_s: float, queue_holds: Callable[[], int], door: Door) -> None:
    """SIGTERM (docker stop, a Space restarting) closes the server without losing finished work, all within
    `grace_s` seconds (Docker's stop timeout leaves the process a few more to exit): new jobs are refused, each
    running one stops after the chunk it is on (a VCF keeps its finished records, closed, indexed and marked
    partial) in all but the last STOP_AT_ONCE_S + ANSWER_QUEUE_S of them; then what still runs is stopped at
    its next checkpoint. Before the server closes, `door` refuses what is sent and every job still in the
    queue (`queue_holds` counts them) is answered with the shutting-down sentence, rather than lost with the
    queue. Each step is logged."""

    def on_sigterm(number, frame) -> None:
        deadline = time.monotonic() + grace_s

        def until(reserve: float) -> float:  # seconds left before the last `reserve` of the grace
            return max(0.0, deadline - reserve - time.monotonic())

        log.warning("SIGTERM: closing; %d running job(s) stop after their current chunk (at most %.0f s)",
                    stopping.running_jobs(), until(STOP_AT_ONCE_S + ANSWER_QUEUE_S))
        stopping.shut_down("SIGTERM")
        if not stopping.wait_for_jobs(until(STOP_AT_ONCE_S + ANSWER_QUEUE_S)):
            log.warning("SIGTERM: the time for a chunk is over; stopping %d job(s) at once", stopping.running_jobs())
            stopping.shut_down("SIGTERM", now=True)
            stopping.wait_for_jobs(until(ANSWER_QUEUE_S))
        door.close(stopping.shutdown_refusal("this job"))
        answered = time.monotonic() + max(0.5, until(0.5))  # each job left in the queue meets the sentence at once
        while queue_holds() and time.monotonic() < answered:
            time.sleep(0.05)
        time.sleep(0.5)  # the last results on their way to their pages
        left = stopping.running_jobs()  # said as it is: a job past its checkpoints is not called stopped
        log.warning("SIGTERM: %s; the server closes", "every job has stopped" if not left else
                    f"{left} job(s) still running, stopped with the process")
        raise KeyboardInterrupt  # Gradio's own way out of launch(): it closes the server

    signal.signal(signal.SIGTERM, on_sigterm)


def check_port_free(host: str, port: int) -> None:
    """Refuse, in one sentence, a port another program holds (Gradio would say so with a traceback, after
    the models had loaded)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no bar
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise InputError(f"port {port} on {host} is in use or not allowed ({exc.strerror}): stop what holds "
                             "it, or start on another port with GRADIO_SERVER_PORT=7861") from None


def launch() -> None:
    """Start the server: preload the configured models, bounded queue, port 7860; a sign-in page first when
    CARBON_AUTH names users. SIGTERM stops it without losing finished work (`stop_on_sigterm`)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    log.setLevel(logging.INFO)
    settings.check_all()  # a bad value is named now, before the models load
    auth = sign_ins(settings.get("CARBON_AUTH"))
    host, port = settings.get("GRADIO_SERVER_NAME"), settings.get("GRADIO_SERVER_PORT")
    check_port_free(host, port)  # before the models load, which takes a while
    # Gradio's cache (uploads, its copies of served files) in a folder of this server's own, which the uploads'
    # cap measures: Gradio reads the variable whenever it writes there
    cache = own_cache_folder(Path(settings.get("GRADIO_TEMP_DIR") or get_upload_folder()))
    os.environ["GRADIO_TEMP_DIR"] = str(cache)
    grace = settings.get("CARBON_SHUTDOWN_GRACE_S")
    manager = ModelManager()
    config = AppConfig.from_env()
    service = Service(manager, config)
    service.fetch_models()  # downloads happen now or never: no request makes one
    if config.server:  # named at start when it cannot be reached or serves another model; kept connected
        for name in config.models:
            service.model(name)
    elif settings.get("CARBON_PRELOAD"):
        for name in config.models:
            bundle = model_thread.call(manager.get, name)  # loaded where requests will run it
            if bundle.draft:
                model_thread.call(manager.get, bundle.draft)
    demo = build_app(service=service)
    # api_open=False: a queued event is reached only through the queue, so its bound holds for every client
    demo.queue(max_size=settings.get("CARBON_QUEUE_SIZE"), default_concurrency_limit=1, api_open=False)
    # each visitor holds at most CARBON_JOBS_PER_CLIENT model jobs (`admission`); with sign-in on, the page a
    # visitor gets before signing in names no endpoint (`sign_in.HideApiSignedOut`)
    hops = settings.get("CARBON_PROXY_HOPS")
    hops = (1 if settings.get("SPACE_ID") else 0) if hops is None else hops  # a Space's requests come by its proxy
    door = Door()
    mb = 2**20
    uploads = UploadBudget(cache, settings.get("CARBON_UPLOADS_MAX_MB") * mb,
                           settings.get("CARBON_UPLOAD_MB_PER_HOUR") * mb, request_bytes=MAX_UPLOAD_BYTES + mb)
    middleware = [Middleware(Admission, blocks=demo, limit=settings.get("CARBON_JOBS_PER_CLIENT"), proxy_hops=hops,
                             door=door, uploads=uploads)]
    if auth:
        middleware.append(Middleware(HideApiSignedOut))
    stop_on_sigterm(grace, lambda: len(model_jobs(demo._queue)), door)
    demo.launch(css=CSS, js=PAGE_JS, theme=page_theme(), server_name=host, server_port=port,
                max_file_size=MAX_UPLOAD_BYTES, allowed_paths=[str(ASSETS / "examples"), str(config.output_dir)],
                auth=auth, app_kwargs={"middleware": middleware})
