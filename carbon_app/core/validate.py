"""The checks every request's numbers go through, whichever face they came from.

The request layers (`inference.request` for designs, the scoring spec for scores) call these on what
a face sends (a web form 300.0 or None, the CLI an int, a notebook anything), so each field is checked
once, in one place, and refused with one sentence that names it.
"""

from __future__ import annotations

import argparse
import math
import numbers
from pathlib import Path

from ..errors import InputError


def whole_number(value, what: str, low: int, high: int | None = None) -> int:
    """`value` as an int within [low, high], or InputError naming `what`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"{what} is empty")
    if isinstance(value, bool):
        raise InputError(f"{what} must be a whole number, not {value!r}")
    if isinstance(value, str):
        try:  # exact for a big whole number (a seed); a form's "300.0" through float
            value = int(value.strip()) if value.strip().lstrip("+-").isdigit() else float(value)
        except ValueError:
            raise InputError(f"{what} must be a whole number, not '{value}'") from None
    if not isinstance(value, numbers.Real) or not math.isfinite(value) or value != int(value):
        raise InputError(f"{what} must be a whole number, not {value!r}")
    number = int(value)
    if number < low or (high is not None and number > high):
        bound = f"between {low:,} and {high:,}" if high is not None else f"at least {low:,}"
        raise InputError(f"{what} must be {bound}, not {number:,}")
    return number


def real_number(value, what: str, low: float | None = None, high: float | None = None, *,
                above_low: bool = False) -> float:
    """`value` as a finite float within [low, high] ((low, high] with `above_low`), either bound
    optional, or InputError naming `what`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"{what} is empty")
    if isinstance(value, bool):
        raise InputError(f"{what} must be a number, not {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a number, not {value!r}") from None
    too_low = low is not None and (number <= low if above_low else number < low)
    if math.isfinite(number) and not too_low and (high is None or number <= high):
        return number
    if low is not None and high is not None and not above_low:
        bound = f"between {low:g} and {high:g}"
    elif low is not None:
        bound = f"{'above' if above_low else 'at least'} {low:g}"
        bound += f" and at most {high:g}" if high is not None else ""
    else:
        bound = f"at most {high:g}" if high is not None else "a finite number"
    raise InputError(f"{what} must be {bound}, not {number:g}")


def argument_type(check):
    """An argparse type from a check that raises InputError: the check's sentence, which names the flag,
    becomes argparse's message (so a command-line flag is refused by the same check as any other face)."""
    def parse(text: str):
        try:
            return check(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def output_file(path) -> Path:
    """A file to write, checked before any work: its folder exists and takes a new file (tried, not asked: a
    root process is told /sys is writable), and it is not a folder itself."""
    import tempfile

    path = Path(path)
    if not path.parent.is_dir():
        raise InputError(f"the folder of the output '{path}' does not exist: make it first")
    if path.is_dir():
        raise InputError(f"the output '{path}' is a folder: name a file")
    try:
        with tempfile.TemporaryFile(dir=path.parent, prefix=".carbon-probe-"):
            pass
    except OSError as exc:
        raise InputError(f"the folder of the output '{path}' cannot be written ({exc.strerror or exc}): choose "
                         "another") from None
    return path
