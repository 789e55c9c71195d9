"""The lazy half of a distribution's public face: names that import torch, numpy-heavy modules or
the runtime behind them load on first use, so importing a face (as every plugin's hooks module does
at registration) stays cheap. `longca.plugin`, `longca_cp.plugin`, `longca_flashplan.plugin` and
`longca_testing` each keep a `_LAZY` table of name -> (module, attribute) and use `lazy_getattr`."""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_getattr(face: str, table: dict[str, tuple[str, str]], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` for `face`: loads `table[name]` once, caches it in `namespace`."""
    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {face!r} has no attribute {name!r}")
        module, attr = table[name]
        value = getattr(import_module(module), attr)
        namespace[name] = value
        return value
    return __getattr__
