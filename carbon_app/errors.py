"""Errors a user can act on, and what a bug becomes.

Every failure caused by input or configuration is a `CarbonError` whose message
is one sentence a biologist understands. The CLI prints it on one line and
exits non-zero; the web UI shows it as a message. Anything else is a bug: it is
logged whole under an id (`report_bug`), and the person reads "internal error"
with that id, never a bug dressed as their own mistake.
"""

from __future__ import annotations

import logging
import secrets
import traceback

LOGGED_LINE_CHARS = 2000  # a traceback's line is cut here: a message that quotes a pasted input stays short


class CarbonError(Exception):
    """Base class for errors whose message is meant for the user."""


class InputError(CarbonError, ValueError):
    """A sequence, variant, mask or parameter the user gave is not usable."""


class ModelError(CarbonError):
    """A model cannot be found, loaded, or does not match its files."""


class ScoresUnavailable(CarbonError):
    """The model's log-probs cannot be read exactly where asked (a server returns too few of them): a score
    needs them, so it is refused; a design already made keeps its bases and says why its score is missing."""


class BackendError(CarbonError):
    """Where the model's forward passes run cannot do what was asked: a server unreachable, refusing or
    failing a request, or work that needs the model in this process."""


def report_bug(exc: BaseException, where: str, write=None) -> str:
    """Log `exc`, a bug met in `where`, with its traceback (each line cut at LOGGED_LINE_CHARS) under a fresh id
    (to the "carbon_app" log, or through `write`: the command line's log is its stderr); return the sentence a
    person reads, which names the id and nothing of the bug."""
    ident = secrets.token_hex(4)
    lines = "".join(traceback.format_exception(exc)).splitlines()
    shown = "\n".join(line if len(line) <= LOGGED_LINE_CHARS else f"{line[:LOGGED_LINE_CHARS]}… ({len(line):,} "
                       "characters)" for line in lines)
    (write or logging.getLogger("carbon_app").error)(f"internal error {ident} in {where}:\n{shown}")
    return (f"internal error {ident}: a fault in Carbon Studio, not in what you gave; it is logged under "
            f"{ident} (please report it with that id)")
