"""Errors a user can act on.

Every failure caused by input or configuration is a `CarbonError` whose message
is one sentence a biologist understands. The CLI prints it on one line and
exits non-zero; the web UI shows it as a message. Anything else is a bug.
"""


class CarbonError(Exception):
    """Base class for errors whose message is meant for the user."""


class InputError(CarbonError, ValueError):
    """A sequence, variant, mask or parameter the user gave is not usable."""


class ModelError(CarbonError):
    """A model cannot be found, loaded, or does not match its files."""


class ScoresUnavailable(CarbonError):
    """The model's log-probs cannot be read exactly where asked (a server returns too few of them): a score
    needs them, so it is refused; a design already made keeps its bases and says why its score is missing."""
