"""The shape of plan data (``{"groups": [{"ops": [...], "mode": "..."}]}``), checked before a
plan is built: every wrong key, type or value is one :class:`IllegalPlanError` naming where it
is and what is allowed (op names and legality are checked by ``Plan.from_dict`` afterwards)."""

from __future__ import annotations

from typing import Any

from fusiontune.errors import IllegalPlanError, closest

PLAN_KEYS = ("groups",)
GROUP_KEYS = ("ops", "mode")
MODES = ("single", "fused", "merge", "stream")


def check_plan_data(data: Any, source: str) -> None:
    """Raise :class:`IllegalPlanError` unless ``data`` has the plan JSON's shape."""
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
        raise IllegalPlanError(f"{source}: expected an object with a 'groups' list")
    _check_keys(data, PLAN_KEYS, source)
    for i, group in enumerate(data["groups"]):
        where = f"{source}: groups[{i}]"
        if not isinstance(group, dict):
            raise IllegalPlanError(f"{where} must be an object with 'ops' and 'mode'")
        _check_keys(group, GROUP_KEYS, where)
        ops = group.get("ops")
        if not isinstance(ops, list) or not ops:
            raise IllegalPlanError(f"{where} needs a non-empty 'ops' list")
        for k, op in enumerate(ops):
            if not isinstance(op, str):
                raise IllegalPlanError(
                    f"{where}.ops[{k}] must be an op name (a string), got {_short(op)}"
                )
        mode = group.get("mode")
        if mode is not None and not isinstance(mode, str):
            raise IllegalPlanError(
                f"{where}.mode must be one of {', '.join(MODES)}, got {_short(mode)}"
            )


def _check_keys(data: dict[Any, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise IllegalPlanError(
                f"{where}: unknown key {_short(key)}{closest(str(key), allowed)}; "
                f"allowed: {', '.join(allowed)}"
            )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
