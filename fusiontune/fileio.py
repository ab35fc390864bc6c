"""Reading user files safely: text, YAML and JSON with limits, every failure one line naming
the file.

- :func:`read_text`: UTF-8 text of at most :data:`MAX_TEXT_BYTES`; a missing or unreadable
  file, a folder or bytes that are not UTF-8 are errors naming the file (and the offset).
- :func:`parse_yaml`: PyYAML's safe loader (plain data only: no Python objects), plus limits
  that stop the classic attacks before they cost anything: at most
  :data:`MAX_NESTING_DEPTH` levels of nesting and :data:`MAX_YAML_NODES` nodes once aliases
  are expanded (an "alias bomb" of a few hundred bytes expands to billions of nodes), no
  recursive aliases, no key given twice in one mapping (PyYAML would keep the last one
  silently). A caller's ``check`` (the validator of the file's keys) runs on a bounded
  copy of a document over the node limit (:data:`BOUNDED_COPY_NODES` nodes, breadth first),
  so an alias bomb under a misspelt key or holding a bad value is refused naming that key or
  value, as the file written out would be, and never expanded.
- :func:`parse_json`: ``json.loads`` with the same nesting limit.

The caller passes the error class to raise (``ConfigError`` for configurations,
``IllegalPlanError`` for plans, ``StorageError`` for results).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fusiontune.errors import FusiontuneError

MAX_TEXT_BYTES = 64 << 20
"""Largest text file read (64 MiB): configurations and plans are kilobytes."""

MAX_NESTING_DEPTH = 64
"""Deepest nesting of lists and mappings in a YAML or JSON file (configs use 3-4 levels)."""

MAX_YAML_NODES = 100_000
"""Most YAML nodes after alias expansion (a search space or hardware file has ~100)."""

BOUNDED_COPY_NODES = 200
"""Nodes of the bounded copy a ``check`` validates when a document is over
:data:`MAX_YAML_NODES`: every key a real file has, few enough to quote in a message."""


def read_text(path: str | Path, error: type[FusiontuneError], what: str = "file") -> str:
    """The UTF-8 text of ``path``.

    Raises:
        error: the file is missing, a folder, unreadable, too large or not UTF-8.
    """
    p = Path(path)
    try:
        if p.is_dir():
            raise error(f"{p}: is a folder, not a {what}")
        size = p.stat().st_size
        if size > MAX_TEXT_BYTES:
            raise error(
                f"{p}: {size:,} bytes is too large for a {what} (at most {MAX_TEXT_BYTES:,})"
            )
        data = p.read_bytes()
    except FileNotFoundError:
        raise error(f"{p}: {what} not found") from None
    except OSError as exc:
        raise error(f"{p}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{p}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            f"save the {what} as UTF-8"
        ) from None


def load_yaml(
    path: str | Path,
    error: type[FusiontuneError],
    what: str = "YAML file",
    check: Callable[[Any], object] | None = None,
) -> Any:
    """Read and parse a YAML file (see :func:`parse_yaml`)."""
    return parse_yaml(read_text(path, error, what), str(path), error, check)


def parse_yaml(
    text: str,
    source: str,
    error: type[FusiontuneError],
    check: Callable[[Any], object] | None = None,
) -> Any:
    """Plain data of a YAML document, within the limits of this module.

    Args:
        check: the caller's validator of the data; it runs only on a document over the node
            limit, on a bounded copy (see the module docstring): the error it raises is the
            one raised, with a note on the expansion.

    Raises:
        error: not valid YAML (with the line), nested too deep, too many nodes once aliases
            are expanded (or what ``check`` raises on a bounded copy), or a recursive alias.
    """
    import yaml

    loader = _limited_loader_class()(text)
    try:
        return loader.get_single_data()
    except _TooManyNodes as exc:
        if check is not None:
            _check_bounded(loader, exc.node, check, source, error)
        raise error(f"{source}: {exc}") from None
    except _LimitExceeded as exc:
        raise error(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None)
        detail = f" ({problem})" if problem else ""
        raise error(f"{source}: not valid YAML{where}{detail}") from None
    except RecursionError:
        raise error(f"{source}: nested deeper than {MAX_NESTING_DEPTH} levels") from None
    finally:
        loader.dispose()


def dump_yaml(data: Any) -> str:
    """YAML text of plain data (keys in the given order, short lists inline): files fusiontune
    writes for people and for :func:`load_yaml` (``best_hardware.yaml``)."""
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))


def parse_json(text: str, source: str, error: type[FusiontuneError]) -> Any:
    """``json.loads`` with the nesting limit; errors name the file and the line."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise error(f"{source}: nested deeper than {MAX_NESTING_DEPTH} levels") from None
    if _depth(data) > MAX_NESTING_DEPTH:
        raise error(f"{source}: nested deeper than {MAX_NESTING_DEPTH} levels")
    return data


def _depth(data: Any) -> int:
    """Nesting depth of plain data (iterative: deep data must not exhaust the stack)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_NESTING_DEPTH:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


class _LimitExceeded(Exception):
    pass


class _TooManyNodes(_LimitExceeded):
    """A document over :data:`MAX_YAML_NODES` once expanded; ``node`` is its composed root."""

    def __init__(self, message: str, node: Any) -> None:
        super().__init__(message)
        self.node = node


def _check_bounded(
    loader: Any,
    node: Any,
    check: Callable[[Any], object],
    source: str,
    error: type[FusiontuneError],
) -> None:
    """Run ``check`` on a bounded copy of the document ``node``; raise what it raises, noting
    the expansion. Constructing shares each anchored object among its aliases (linear in the
    file); only the copy would expand, and it stops at :data:`BOUNDED_COPY_NODES`."""
    import yaml

    try:
        data = loader.construct_document(node)
    except (yaml.YAMLError, ValueError):  # a value YAML cannot construct: the expansion message
        return
    try:
        check(_bounded_copy(data, BOUNDED_COPY_NODES))
    except FusiontuneError as exc:
        raise error(
            f"{exc} (and its aliases expand to more than {MAX_YAML_NODES:,} nodes: write the "
            "values out)"
        ) from None


def _bounded_copy(data: Any, budget: int) -> Any:
    """A copy of plain data with at most ``budget`` container entries, breadth first: every
    shallow key is kept before deeper content; past the budget containers stay short."""

    def empty(item: Any) -> Any:
        return {} if isinstance(item, dict) else [] if isinstance(item, list) else item

    root = empty(data)
    queue: list[tuple[Any, Any]] = [(data, root)] if root is not data else []
    head = 0
    while head < len(queue) and budget > 0:
        source, target = queue[head]
        head += 1
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, value in pairs:
            if budget <= 0:
                break
            budget -= 1
            copy = empty(value)
            if isinstance(target, dict):
                target[key] = copy
            else:
                target.append(copy)
            if copy is not value:
                queue.append((value, copy))
    return root


_LOADER: type | None = None


def _limited_loader_class() -> type:
    """``yaml.SafeLoader`` that checks depth while composing and the expanded node count of
    each document before constructing Python objects from it."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml

    class LimitedSafeLoader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self._depth += 1
            try:
                if self._depth > MAX_NESTING_DEPTH:
                    raise _LimitExceeded(f"nested deeper than {MAX_NESTING_DEPTH} levels")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def compose_document(self) -> Any:
            node = super().compose_document()
            _check_expanded_size(node)
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            _check_unique_keys(node, yaml)
            return super().construct_mapping(node, deep=deep)

    _LOADER = LimitedSafeLoader
    return _LOADER


def _check_expanded_size(root: Any) -> None:
    """Count the nodes of a composed YAML document as if every alias were copied; refuse
    beyond :data:`MAX_YAML_NODES` and refuse recursive aliases (linear in distinct nodes)."""
    import yaml

    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node, yaml))
            if total > MAX_YAML_NODES:
                raise _TooManyNodes(
                    f"expands to more than {MAX_YAML_NODES:,} nodes (aliases repeat anchored "
                    "content); write the values out or reduce the aliases",
                    root,
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise _LimitExceeded("an alias refers to a node that contains it (recursive alias)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node, yaml) if id(child) not in sizes)


def _check_unique_keys(node: Any, yaml: Any) -> None:
    """Refuse a mapping that gives one scalar key twice (merge keys ``<<`` may be overridden:
    that is what they are for)."""
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        line = key.start_mark.line + 1
        first = seen.get((key.tag, key.value))
        seen.setdefault((key.tag, key.value), line)
        if first is not None:
            raise _LimitExceeded(
                f"key '{key.value}' is given twice (lines {first} and {line}); keep one"
            )


def _children(node: Any, yaml: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
