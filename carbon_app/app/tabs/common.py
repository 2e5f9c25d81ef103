"""What every tab shares: the model queue, the top-of-page choices, error display, sequence inputs."""

from __future__ import annotations

import functools
import html
import inspect
import json
from dataclasses import dataclass, field

import gradio as gr

from ...assets import ASSETS
from ...core.stopping import Stopped
from ...errors import CarbonError, InputError, report_bug
from ...inference.spec import OWN_RADIUS, radius_text
from ...model.hub import on_zero_gpu
from .. import formatting as fmt
from ..admission import MODEL_GROUP
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


def guarded(fn):
    """`fn` (a handler: a function or a generator function) refusing, before it starts, any text a client sends
    that is longer than MAX_PASTE_CHARS, named by its field (whatever a field means, nothing in it is read
    further; each field's own bound is checked where it is read), and answering in one sentence whatever stops
    it: a person's mistake (`CarbonError`) as its message, a bug as "internal error <id>", the bug logged whole
    under that id (`errors.report_bug`). A message already made (gr.Error) and a stop pass as they are."""
    names = list(inspect.signature(fn).parameters)

    def check(args, kwargs) -> None:
        for name, value in [*zip(names, args, strict=False), *kwargs.items()]:
            if isinstance(value, str) and len(value) > MAX_PASTE_CHARS:
                fail(InputError(f"the {name.replace('_', ' ')} field is {len(value):,} characters; the limit is "
                                f"{MAX_PASTE_CHARS:,}"))

    def answer(exc: Exception):
        if isinstance(exc, (gr.Error, Stopped)):
            raise exc
        if isinstance(exc, CarbonError):
            fail(exc)
        where = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "handler")
        raise gr.Error(report_bug(exc, f"the page's {where}"), print_exception=False) from None

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def steps(*args, **kwargs):
            check(args, kwargs)
            try:
                yield from fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - each kind answered as `answer` says
                answer(exc)
        return steps

    @functools.wraps(fn)
    def run(*args, **kwargs):
        check(args, kwargs)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - each kind answered as `answer` says
            answer(exc)
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
    """The service and the model choice at the top of the page, and the fields of each tab that are set to
    the chosen model's own whenever the model changes."""

    service: Service
    model: gr.Dropdown
    examples: dict  # assets/examples/hbb.json
    hbb: str  # the worked example's bases
    scoring: list = field(default_factory=list)  # the tabs' scoring dropdowns, set to each chosen model's own
    windows: list = field(default_factory=list)  # the tabs' window fields, likewise
    strands: list = field(default_factory=list)  # the tabs' strand-averaging boxes, likewise
    frames: list = field(default_factory=list)  # the tabs' frame counts, likewise
    radii: list = field(default_factory=list)  # the tabs' delta radii, likewise
    scoring_tags: list = field(default_factory=list)  # (species, region) of each scoring tab: the model's own tags
    design_tags: list = field(default_factory=list)  # (species, region) of the Design tab: none until chosen

    def tag_dropdowns(self, scoring: bool) -> tuple[gr.Dropdown, gr.Dropdown]:
        """A tab's own species and region tags, offering the model's scheme. A scoring tab's start as the
        model's own setup names them (none for Carbon's measured setup: a tag moves every score, so it is a
        choice made for one scoring run, on its tab, and named beside the score); a design's start at none."""
        species_keys, region_keys = self.service.tag_choices(None)
        setup = self.service.scoring_setup(None)
        info = ("the model's own setup has none: its quality was measured without tags, and a tag changes every "
                "score" if scoring else "the tags this model's scheme has")
        species = gr.Dropdown(species_keys, value=(setup["species"] if scoring else None) or "none",
                              label="Species tag", **FREE, info=info)
        region = gr.Dropdown(region_keys, value=(setup["region"] if scoring else None) or "none",
                             label="Region tag", **FREE)
        (self.scoring_tags if scoring else self.design_tags).append((species, region))
        return species, region

    def more_setup(self) -> dict:
        """The scoring setup's settings a tab folds away (tags, frames, the delta's radius), each set to the
        model's own, by the names the engine takes them."""
        setup = self.service.scoring_setup(None)
        with gr.Accordion("More of the scoring setup: tags, frames, radius (the model's own unless changed)",
                          open=False):
            species, region = self.tag_dropdowns(scoring=True)
            with gr.Row():
                frames = gr.Number(label="Tokenization frames averaged", value=setup["frames"],
                                   info="1 to k (6); set to the model's own")
                radius = gr.Textbox(label="Delta radius (bases either side, or 'whole')",
                                    value=radius_text(setup["delta_radius"]), info="set to the model's own")
        self.frames.append(frames)
        self.radii.append(radius)
        return {"species": species, "region": region, "frames": frames, "delta_radius": radius}


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
        """The updates that set every field of `setup_fields` to model `name`'s own: its scoring setup, and its
        tag scheme's choices (the design's tags back at none)."""
        setup = self.service.scoring_setup(name)
        species_keys, region_keys = self.service.tag_choices(name)

        def tags(species, region) -> list:
            return [gr.Dropdown(choices=species_keys, value=species or "none"),
                    gr.Dropdown(choices=region_keys, value=region or "none")]

        return ([gr.Dropdown(choices=SCORING, value=setup["method"]) for _ in self.scoring]
                + [gr.Number(value=setup["window"]) for _ in self.windows]
                + [gr.Checkbox(value=bool(setup["strand_average"])) for _ in self.strands]
                + [gr.Number(value=setup["frames"]) for _ in self.frames]
                + [gr.Textbox(value=radius_text(setup["delta_radius"])) for _ in self.radii]
                + [update for _ in self.scoring_tags for update in tags(setup["species"], setup["region"])]
                + [update for _ in self.design_tags for update in tags(None, None)])

    @property
    def model_queue(self) -> dict:
        """The concurrency group of every event that runs a model, all tabs together: one request at a time
        on a model in this process; with an inference server, up to CARBON_SERVER_CONCURRENCY at once (the
        server batches them)."""
        config = self.service.config
        return dict(concurrency_id=MODEL_GROUP, concurrency_limit=config.server_concurrency if config.server else 1)

    def runs_model(self, fn):
        """A handler that runs a model, stopped when its request is cancelled or its tab closed: in this
        process on the model thread (`on_gpu`); with a server on a thread of its own, so that many users'
        requests reach the server at once."""
        fn = guarded(fn)
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
    def setup_fields(self) -> list:
        """Every field set to the chosen model's own, in `own_scoring`'s order."""
        return [*self.scoring, *self.windows, *self.strands, *self.frames, *self.radii,
                *(box for pair in [*self.scoring_tags, *self.design_tags] for box in pair)]

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


def scoring_extras(frames=None, delta_radius=None) -> dict:
    """The folded settings of `Page.more_setup` as the service takes them: a field left empty (or an API client
    that sends none) is the model's own."""
    return {"frames": None if frames in (None, "") else frames,
            "delta_radius": OWN_RADIUS if delta_radius in (None, "") else delta_radius}
