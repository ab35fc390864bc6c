"""Reference executor: op-by-op numpy, the numerical ground truth for the fused kernels.

The executor is an interpreter (STYLE habit 4): :func:`reference_run` walks the graph in
topological order and runs each op's reference kernel, which its
:class:`~fusiontune.ops.OpDef` holds (``fusiontune/ops/``, one numpy kernel per ONNX op
type; :func:`run_op` runs one).

Kernels compute in the dtype of their inputs (float32 for every zoo model), like onnxruntime.
Tolerance achieved against onnxruntime, as ``max|ref - ort| / max|ort|``: at most 1.1e-6 on
the single-op tests and 1.8e-6 on the zoo models; 2.8e-6 for resnet18_train against
``onnx.reference`` (tests/test_reference.py and tests/test_zoo_onnxruntime.py assert 1e-5).
Convolutions and pools are vectorized with :func:`numpy.lib.stride_tricks.sliding_window_view`
(no Python loop over pixels); ONNX attribute semantics (pads, strides, dilations, groups,
``auto_pad``, ``ceil_mode``, ``count_include_pad``, ...) follow the ONNX operator
specification, with operands accepted in both their attribute form (old opsets) and their
input form (new opsets).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fusiontune.errors import FusiontuneError, ShapeError, closest
from fusiontune.ir.graph import Graph
from fusiontune.ops import run_reference as run_op

__all__ = ["random_inputs", "reference_run", "run_op"]

Array = np.ndarray
RANDOM_INT_HIGH = 8  # random_inputs: integer inputs are drawn from [0, RANDOM_INT_HIGH)


def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, Array]:
    unknown = [name for name in inputs if name not in graph.inputs]
    if unknown:
        raise FusiontuneError(
            f"graph '{graph.name}': '{unknown[0]}' is not a graph input"
            f"{closest(unknown[0], graph.inputs)}; inputs are {list(graph.inputs)}"
        )
    values: dict[str, Array] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        if name not in inputs:
            raise FusiontuneError(
                f"graph '{graph.name}': input '{name}' is missing; expected shape {t.shape} "
                f"dtype {t.dtype}"
            )
        value = np.asarray(inputs[name])
        if value.shape != t.shape or value.dtype != np.dtype(t.dtype):
            raise FusiontuneError(
                f"graph '{graph.name}': input '{name}' has shape {value.shape} dtype "
                f"{value.dtype}; expected shape {t.shape} dtype {t.dtype}"
            )
        values[name] = value
    return values


def reference_run(
    graph: Graph, inputs: Mapping[str, np.ndarray], keep_intermediates: bool = False
) -> dict[str, np.ndarray]:
    """Run a graph op by op in topological order.

    Args:
        graph: the graph.
        inputs: one array per graph input, with the input's exact shape and dtype.
        keep_intermediates: also return every activation tensor (graph inputs and the
            outputs of every op), not just the graph outputs.

    Returns:
        Graph outputs by name (or every activation tensor when ``keep_intermediates``).

    Raises:
        FusiontuneError: an input is missing, unknown or has the wrong shape or dtype; an op
            has no kernel; an op computes a shape that differs from the graph's.
    """
    env: dict[str, Array] = {
        name: t.value for name, t in graph.tensors.items() if t.value is not None
    }
    env.update(_check_inputs(graph, inputs))
    activations = {name: env[name] for name in graph.inputs}
    for op in graph.ops:
        args = [env[name] if name else None for name in op.inputs]
        outs = run_op(op, args)
        for name, value in zip(op.outputs, outs):
            if not name:
                continue
            expected = graph.tensors[name].shape
            if value.shape != expected:
                raise ShapeError(
                    f"op '{op.name}' ({op.op_type}): computed output '{name}' of shape "
                    f"{value.shape}, the graph says {expected}"
                )
            env[name] = value
            activations[name] = value
        needed = [n for n in op.outputs[len(outs) :] if n]
        missing = [n for n in needed if n in graph.consumer_map or n in graph.outputs]
        if missing:
            raise FusiontuneError(
                f"op '{op.name}' ({op.op_type}): the reference kernel does not compute "
                f"output '{missing[0]}'"
            )
    if keep_intermediates:
        return activations
    return {name: env[name] for name in graph.outputs}


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random values for every graph input.

    Float inputs are standard normal (in the input's dtype, float32 for the zoo); integer
    inputs are uniform in ``[0, RANDOM_INT_HIGH)``; boolean inputs are fair coin flips.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        dtype = np.dtype(t.dtype)
        if np.issubdtype(dtype, np.floating):
            out[name] = rng.standard_normal(t.shape).astype(dtype)
        elif dtype == np.bool_:
            out[name] = rng.random(t.shape) < 0.5
        else:
            out[name] = rng.integers(0, RANDOM_INT_HIGH, size=t.shape).astype(dtype)
    return out
