"""Where an exported model carries its fusion plan: the format shared by export and import.

:mod:`fusiontune.export.plan_export` writes a plan's groups as calls of functions in
:data:`PLAN_DOMAIN` and the plan's canonical JSON under :data:`PLAN_KEY` in the model's
``metadata_props``; :func:`fusiontune.frontend.onnx_import.load_onnx_with_plan` reads it back
with :func:`embedded_plan_json`. It lives on the import side so that the importer needs
nothing from the exporter (which sits above the simulator).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

PLAN_DOMAIN = "fusiontune"
"""ONNX domain of the group functions."""
PLAN_DOMAIN_VERSION = 1
"""Opset version declared for :data:`PLAN_DOMAIN`."""
META = "fusiontune."
"""Prefix of every metadata key the exporter writes."""
PLAN_KEY = META + "plan"
"""Model metadata key holding the plan's canonical JSON."""


def embedded_plan_json(model: onnx.ModelProto) -> str | None:
    """The plan JSON an exported model carries in its metadata (``None`` for other models)."""
    for prop in model.metadata_props:
        if prop.key == PLAN_KEY:
            return str(prop.value)
    return None
