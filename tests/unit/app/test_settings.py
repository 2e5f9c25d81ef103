"""Settings are declared and read in one place; a bad one is refused by name; a bug reaches a person as
"internal error <id>", logged whole under that id, never as their own mistake."""

from __future__ import annotations

import ast
import logging
import re
import subprocess
import sys

import gradio as gr
import pytest

from carbon_app import settings
from carbon_app.app.tabs.common import guarded
from carbon_app.errors import InputError
from tests.conftest import REPO

PACKAGE = REPO / "carbon_app"
WORKSHOP = ("training", "tools")  # the demo-model pipeline and the benchmarks: not the app


def _environment_reads(path) -> list[int]:
    """Lines of `path` that read the environment (os.environ.get, os.environ[...], os.getenv)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv"):
            found.append(node.lineno)
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" and isinstance(
                node.ctx, ast.Load):
            found.append(node.lineno)
    return found


def test_only_the_settings_module_reads_the_environment():
    readers = {str(path.relative_to(REPO)): lines for path in PACKAGE.rglob("*.py")
               if path.relative_to(PACKAGE).parts[0] not in WORKSHOP and path.name != "settings.py"
               and (lines := _environment_reads(path))}
    assert readers == {}


def test_every_setting_the_code_names_is_declared_and_the_docs_table_is_the_declaration():
    named = set()
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] not in WORKSHOP:
            named |= set(re.findall(r"settings\.(?:get|is_on)\(\"([A-Z_]+)\"", path.read_text()))
    declared = {setting.name for setting in settings.SETTINGS}
    assert named <= declared and len(named) >= 20
    assert settings.markdown_table() in (REPO / "docs" / "settings.md").read_text()


@pytest.mark.parametrize("name, value, said", [
    ("CARBON_QUEUE_SIZE", "lots", "the environment variable CARBON_QUEUE_SIZE must be a whole number"),
    ("GRADIO_SERVER_PORT", "70000", "the environment variable GRADIO_SERVER_PORT must be"),
    ("CARBON_SERVER_TIMEOUT_S", "-3", "the environment variable CARBON_SERVER_TIMEOUT_S must be"),
    ("CARBON_PRELOAD", "maybe", "the environment variable CARBON_PRELOAD must be 1 or 0"),
])
def test_a_bad_value_is_refused_in_one_sentence_that_names_it(name, value, said):
    with pytest.raises(InputError) as refused:
        settings.check_all({name: value})
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)


def test_the_defaults_are_the_documented_values():
    assert settings.get("CARBON_QUEUE_SIZE", {}) == 32 and settings.get("CARBON_PRELOAD", {}) is True
    assert settings.get("CARBON_SERVER", {"CARBON_SERVER": "  "}) is None  # blank: unset
    assert settings.get("CARBON_RESULTS_MAX_AGE_HOURS", {"CARBON_RESULTS_MAX_AGE_HOURS": "0.5"}) == 0.5


def test_the_command_line_names_a_bad_setting_before_any_work(tmp_path):
    done = subprocess.run([sys.executable, "-m", "carbon_app", "tokenize", "ACGTAC"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "CARBON_SERVER_TIMEOUT_S": "soon", "HOME": str(tmp_path)},
                          cwd=REPO, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == "error: the environment variable CARBON_SERVER_TIMEOUT_S must be a number, not 'soon'"


def _bug(text: str):
    raise KeyError(text)


def test_a_bug_in_a_page_handler_reaches_the_person_as_an_internal_error_with_an_id(caplog):
    def handler(sequence):
        _bug("A" * 10_000_000)  # a bug whose message quotes what was pasted

    with caplog.at_level(logging.ERROR, logger="carbon_app"), pytest.raises(gr.Error) as shown:
        guarded(handler)("ACGT")
    said = str(shown.value.message)
    ident = re.fullmatch(r"internal error ([0-9a-f]{8}): a fault in Carbon Studio, not in what you gave; .*", said)[1]
    logged = caplog.text
    assert f"internal error {ident} in the page's handler" in logged and "Traceback" in logged
    assert "in _bug" in logged and len(logged) < 20_000  # the whole traceback, its 10 MB line cut short

    def mistake(sequence):
        raise InputError("the sequence has a 'Z' at position 3")

    with pytest.raises(gr.Error, match="the sequence has a 'Z' at position 3"):
        guarded(mistake)("ACZ")

    def streams(sequence):
        yield "first"
        _bug("late")

    steps = guarded(streams)("ACGT")
    assert next(steps) == "first"
    with pytest.raises(gr.Error, match="internal error [0-9a-f]{8}"):
        next(steps)


def test_a_bug_in_a_command_is_logged_with_its_id_and_named_in_one_line(tmp_path):
    bug = ("import sys; import carbon_app.app.cli as cli\n"
           "def _tokenize(args): raise KeyError('a fault')\n"
           "cli._tokenize = _tokenize; sys.exit(cli.main(['tokenize', 'ACGTAC']))")
    done = subprocess.run([sys.executable, "-c", bug], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 1
    err = done.stderr
    ident = re.search(r"^error: internal error ([0-9a-f]{8}): a fault in Carbon Studio", err, re.M)[1]
    assert f"internal error {ident} in the tokenize command" in err and "Traceback" in err and "KeyError" in err


def test_zero_seconds_between_progress_lines_means_every_report():
    assert settings.get("CARBON_PROGRESS_EVERY_S", {"CARBON_PROGRESS_EVERY_S": "0"}) == 0
    with pytest.raises(InputError, match="CARBON_PROGRESS_EVERY_S must be at least 0"):
        settings.get("CARBON_PROGRESS_EVERY_S", {"CARBON_PROGRESS_EVERY_S": "-1"})
