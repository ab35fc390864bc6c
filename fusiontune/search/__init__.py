"""fusiontune.search (private; import from fusiontune).

``fusiontune.search`` is also the public function :func:`fusiontune.search.api.search`. Once
any module of this package is imported, Python binds the package to the attribute ``search``
of ``fusiontune``, replacing the function; so the package is callable too, and calling it
calls the function: ``ft.search(...)`` works whatever was imported before.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from fusiontune.search.api import search

        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
