"""What every tab shares: the model queue, the top-of-page choices, error display, sequence inputs."""

from __future__ import annotations

import functools
import html
import inspect
import json
from dataclasses import dataclass, field

import gradio as gr

from ...assets import ASSETS
from ...errors import InputError
from ...model.hub import on_zero_gpu
from .. import formatting as fmt
from ..model_thread import on_model_thread, stops_when_dropped
from ..service import MAX_PASTE_CHARS, Service

FREE = dict(allow_custom_value=True)  # the value goes to the service or engine, which names a wrong one
SCORING = [(words, method) for method, words in fmt.METHOD_WORDS.items()]  # the scoring dropdowns' choices

def _on_gpu(fn):
    # A ZeroGPU Space lends a GPU per call of a function wrapped in spaces.GPU (a plain or generator function).
    # Every Space has the `spaces` package, and outside ZeroGPU its wrapper is the function itself: there the
    # handlers stop when their request is dropped, as anywhere else.
    if on_zero_gpu():
        import spaces

        return spaces.GPU(on_model_thread(fn))
    # a cancelled or abandoned job stops at its next checkpoint; a heartbeat updates nothing
    return stops_when_dropped(on_model_thread(fn), heartbeat=gr.skip())


def on_gpu(fn):
    """A handler that runs a model: on the model thread (`model_thread` says why), stopped when its request
    is cancelled or its tab closed; on a ZeroGPU Space, inside spaces.GPU instead."""
    return _on_gpu(fn)


def fail(exc: Exception):
    """Bad input or a model problem: a message in the page, not a traceback. Gradio renders an error's
    message as HTML and messages quote what the client sent, so <, > and & are escaped: markup shows as typed
    (an API client reads them as &lt; &gt; &amp;)."""
    raise gr.Error(html.escape(str(exc), quote=False), print_exception=False)


def bounded_text(fn):
    """`fn` (a function or a generator function) refusing, before it starts, any text a client sends that is
    longer than MAX_PASTE_CHARS, named by its field: whatever a field means, nothing in it is read further
    (each field's own bound, derived from what it means, is checked where it is read)."""
    names = list(inspect.signature(fn).parameters)

    def check(args, kwargs) -> None:
        for name, value in [*zip(names, args, strict=False), *kwargs.items()]:
            if isinstance(value, str) and len(value) > MAX_PASTE_CHARS:
                fail(InputError(f"the {name.replace('_', ' ')} field is {len(value):,} characters; the limit is "
                                f"{MAX_PASTE_CHARS:,}"))

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def steps(*args, **kwargs):
            check(args, kwargs)
            yield from fn(*args, **kwargs)
        return steps

    @functools.wraps(fn)
    def run(*args, **kwargs):
        check(args, kwargs)
        return fn(*args, **kwargs)
    return run


def sequence_inputs(label: str, lines: int = 4) -> tuple[gr.Textbox, gr.File]:
    """A paste box with a FASTA upload beside it; the upload wins when both are given."""
    text = gr.Textbox(label=label, lines=lines)
    upload = gr.File(label="…or upload FASTA / GenBank", file_types=[".fa", ".fasta", ".fna", ".txt", ".gb", ".gbk"],
                     height=130)
    return text, upload


def _with_keywords(signature: inspect.Signature, names) -> inspect.Signature:
    """`signature` with its **named spelled out as keyword-only `names` defaulting to None (the form fields
    themselves keep no value of their own: a set one overwrites what a person types as the field appears)."""
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    named = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in names]
    return signature.replace(parameters=[*kept, *named])


@dataclass
class Page:
    """The service and the choices at the top of the page that every tab reads."""

    service: Service
    model: gr.Dropdown
    species: gr.Dropdown
    region: gr.Dropdown
    examples: dict  # assets/examples/hbb.json
    hbb: str  # the worked example's bases
    scoring: list = field(default_factory=list)  # the tabs' scoring dropdowns, set to each chosen model's own
    windows: list = field(default_factory=list)  # the tabs' window fields, likewise
    strands: list = field(default_factory=list)  # the tabs' strand-averaging boxes, likewise

    def scoring_dropdown(self) -> gr.Dropdown:
        """A variant-scoring method choice, set to the model's own (the method its held-out measurement was
        read with) and moved to the next model's own when the model changes."""
        dropdown = gr.Dropdown(SCORING, value=self.service.variant_method(None), label="Scoring", **FREE,
                               info="set to the model's own: the method its measured quality was read with")
        self.scoring.append(dropdown)
        return dropdown

    def window_number(self, label: str) -> gr.Number:
        """A window field set to the model's own window (the one its quality was measured with)."""
        number = gr.Number(label=label, value=self.service.scoring_setup(None)["window"],
                           info="set to the model's own; a window beyond its context is cut to what it holds")
        self.windows.append(number)
        return number

    def strand_checkbox(self) -> gr.Checkbox:
        """Strand averaging, set to the model's own."""
        box = gr.Checkbox(label="Average with the reverse-complement strand",
                          value=bool(self.service.scoring_setup(None)["strand_average"]))
        self.strands.append(box)
        return box

    def own_scoring(self, name: str | None) -> list:
        """The updates that set every scoring field of the page to model `name`'s own setup."""
        setup = self.service.scoring_setup(name)
        return ([gr.Dropdown(choices=SCORING, value=setup["method"]) for _ in self.scoring]
                + [gr.Number(value=setup["window"]) for _ in self.windows]
                + [gr.Checkbox(value=bool(setup["strand_average"])) for _ in self.strands])

    @property
    def model_queue(self) -> dict:
        """The concurrency group of every event that runs a model, all tabs together: one request at a time
        on a model in this process; with an inference server, up to CARBON_SERVER_CONCURRENCY at once (the
        server batches them)."""
        config = self.service.config
        return dict(concurrency_id="model", concurrency_limit=config.server_concurrency if config.server else 1)

    def runs_model(self, fn):
        """A handler that runs a model, stopped when its request is cancelled or its tab closed: in this
        process on the model thread (`on_gpu`); with a server on a thread of its own, so that many users'
        requests reach the server at once."""
        fn = bounded_text(fn)
        if self.service.config.server:
            return stops_when_dropped(fn, heartbeat=gr.skip())
        return on_gpu(fn)

    def run_on_click(self, button: gr.Button, fn, inputs: list, outputs: list, api_name: str, progress_on=None,
                     by_name: dict | None = None):
        """Clear the outputs the moment the button is pressed, then run `fn`: an error never sits beside an
        earlier run's results, and a new result never beside an old one. The progress bar covers `progress_on`
        (default: every output), so a result streamed early stays readable while the rest is computed.
        A press while the last run still streams (a design's logo, a variant's ranking, after its result is
        shown) is kept: it runs once that one ends, rather than being dropped as Gradio's default would.
        `by_name` maps parameter names to inputs that `fn` takes as keyword arguments (`**named`), after `inputs`;
        the API shows each as a parameter a client may leave out."""
        if by_name:
            fn.__signature__ = _with_keywords(inspect.signature(fn), by_name)
        cleared = button.click(lambda: [None] * len(outputs), None, outputs, queue=False, api_visibility="private",
                               trigger_mode="always_last")
        return cleared.then(fn, inputs, outputs, api_name=api_name, show_progress_on=progress_on,
                            trigger_mode="always_last", inputs_kwargs=by_name, **self.model_queue)

    @property
    def scoring_fields(self) -> list:
        return [*self.scoring, *self.windows, *self.strands]

    @classmethod
    def load_examples(cls) -> tuple[dict, str]:
        examples = json.loads((ASSETS / "examples" / "hbb.json").read_text())
        return examples, Service.sequence(None, str(ASSETS / "examples" / examples["file"]), "example")

    @property
    def models(self) -> list[str]:
        return self.service.config.models

    @property
    def genomes(self) -> list[str]:
        return list(self.service.config.genomes)

    @property
    def choices(self) -> list:
        return [self.model, self.species, self.region]
