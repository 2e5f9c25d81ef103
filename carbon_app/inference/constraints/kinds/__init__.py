"""The design constraints, one module each.

Every module here defines one `Constraint` (see `..part`); they are found when the package loads and
ordered by their `order`, so the request layer, the Design tab, the CLI, the search for conflicts and
the report all take a new constraint from its own module, with nothing else to wire.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..part import Constraint, Field


def _discover() -> tuple[type[Constraint], ...]:
    kinds = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        kinds += [value for value in vars(module).values() if isinstance(value, type)
                  and issubclass(value, Constraint) and value.__module__ == module.__name__]
    kinds.sort(key=lambda kind: kind.order)
    names = [f.name for kind in kinds for f in kind.fields]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise RuntimeError(f"design constraints share the field name(s) {', '.join(repeated)}")
    return tuple(kinds)


#: every design constraint, in the order forms, reports and the search for conflicts take them
KINDS: tuple[type[Constraint], ...] = _discover()
#: every field they read, in that order
FIELDS: tuple[Field, ...] = tuple(f for kind in KINDS for f in kind.fields)
