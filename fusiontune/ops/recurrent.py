"""Recurrent ops: LSTM (onnx.ai/onnx/operators/onnx__LSTM.html).

An LSTM is OPAQUE, a barrier to fusion: each time step reads the hidden and cell state the
previous step wrote, so its output rows cannot stream band by band behind a producer (the
whole sequence must be in before the reverse direction's first step, and step ``t`` waits for
step ``t - 1``), and its two matrices ``W`` and ``R`` are applied to different operands (the
input and the fed-back state). It runs by its reference kernel, here.

The kernel follows the ONNX definition (gate order ``i, o, f, c`` in ``W``, ``R`` and ``B``;
peepholes ``P`` in order ``i, o, f``): for each direction and time step ``t``,

    i = f(X_t W_i^T + H R_i^T + P_i * C + Wb_i + Rb_i)
    f_ = f(X_t W_f^T + H R_f^T + P_f * C + Wb_f + Rb_f)      (1 - i with ``input_forget``)
    c = g(X_t W_c^T + H R_c^T + Wb_c + Rb_c)
    C = f_ * C + i * c
    o = f(X_t W_o^T + H R_o^T + P_o * C + Wb_o + Rb_o)
    H = o * h(C)

with ``f, g, h`` the ``activations`` (default Sigmoid, Tanh, Tanh per direction), gate
pre-activations clipped to ``[-clip, clip]`` when ``clip`` is given, ``layout`` 0
(``[seq, batch, ...]``) or 1 (``[batch, seq, ...]``), and ``sequence_lens``: a batch entry of
length ``L`` steps only through ``t < L`` (the reverse direction starts at ``L - 1``); its
outputs at ``t >= L`` are zero and its ``Y_h``/``Y_c`` are the state after its last step
(zero for ``L = 0``, as onnxruntime gives).
Computed in float64 and returned as float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.errors import FusiontuneError, ShapeError
from fusiontune.ops.base import DTYPE, Array, Inputs, OpDef, Shape, Shapes, Tensors, attr, attr_s

if TYPE_CHECKING:
    from fusiontune.ir.graph import Op

DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
DEFAULT_ACTIVATIONS = ("Sigmoid", "Tanh", "Tanh")
N_GATES = 4  # i, o, f, c
N_PEEPHOLES = 3  # i, o, f
RECURRENT_BARRIER = (
    "a recurrent op: each time step reads the state the previous step wrote, so its rows "
    "cannot stream behind a producer's bands"
)
"""Why an LSTM is a barrier to fusion (what ``explain`` says of it)."""

_Act = Callable[[Array], Array]


def _softplus(x: Array) -> Array:
    return np.logaddexp(0.0, x)


# name -> (uses alpha, uses beta, default alpha, default beta, function of (x, alpha, beta))
_ACTIVATIONS: dict[str, tuple[bool, bool, float, float, Callable[[Array, float, float], Array]]] = {
    "Sigmoid": (False, False, 0.0, 0.0, lambda x, a, b: 0.5 * (1.0 + np.tanh(0.5 * x))),
    "Tanh": (False, False, 0.0, 0.0, lambda x, a, b: np.tanh(x)),
    "Relu": (False, False, 0.0, 0.0, lambda x, a, b: np.maximum(x, 0.0)),
    "Softsign": (False, False, 0.0, 0.0, lambda x, a, b: x / (1.0 + np.abs(x))),
    "Softplus": (False, False, 0.0, 0.0, lambda x, a, b: _softplus(x)),
    "LeakyRelu": (True, False, 0.01, 0.0, lambda x, a, b: np.where(x >= 0, x, a * x)),
    "ThresholdedRelu": (True, False, 1.0, 0.0, lambda x, a, b: np.where(x > a, x, 0.0)),
    "Elu": (True, False, 1.0, 0.0, lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1.0))),
    "HardSigmoid": (True, True, 0.2, 0.5, lambda x, a, b: np.clip(a * x + b, 0.0, 1.0)),
    "ScaledTanh": (True, True, 1.0, 1.0, lambda x, a, b: a * np.tanh(b * x)),
    "Affine": (True, True, 1.0, 0.0, lambda x, a, b: a * x + b),
}


def _error(op: Op, message: str) -> FusiontuneError:
    return FusiontuneError(f"op '{op.name}' ({op.op_type}): {message}")


def _directions(op: Op) -> tuple[str, int]:
    direction = attr_s(op, "direction")
    if direction not in DIRECTIONS:
        raise _error(op, f"direction '{direction}' is not one of {', '.join(DIRECTIONS)}")
    return direction, DIRECTIONS[direction]


def _names(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def _activations(op: Op, n_dirs: int) -> list[_Act]:
    """The 3 (or 6, bidirectional) activation functions, with their alpha and beta."""
    names = _names(op.attrs.get("activations") or DEFAULT_ACTIVATIONS * n_dirs)
    if len(names) != 3 * n_dirs:
        raise _error(op, f"activations has {len(names)} entries; {3 * n_dirs} expected")
    alphas = list(op.attrs.get("activation_alpha") or [])
    betas = list(op.attrs.get("activation_beta") or [])
    acts: list[_Act] = []
    for name in names:
        if name not in _ACTIVATIONS:
            raise _error(op, f"activation '{name}' is not one of {', '.join(sorted(_ACTIVATIONS))}")
        uses_a, uses_b, alpha, beta, fn = _ACTIVATIONS[name]
        if uses_a and alphas:
            alpha = float(alphas.pop(0))
        if uses_b and betas:
            beta = float(betas.pop(0))
        acts.append(_bound(fn, alpha, beta))
    return acts


def _bound(fn: Callable[[Array, float, float], Array], alpha: float, beta: float) -> _Act:
    def act(x: Array) -> Array:
        return fn(x, alpha, beta)

    return act


def _hidden(op: Op, r_shape: Shape) -> int:
    given = op.attrs.get("hidden_size")
    hidden = int(given) if given is not None else int(r_shape[-1])
    if hidden != r_shape[-1]:
        raise _error(op, f"hidden_size is {hidden}, but R has shape {r_shape}")
    return hidden


def _lstm_shape(op: Op, tensors: Tensors, ins: Shapes, n: int) -> Shapes:
    x, w, r = (ins + [None] * 3)[:3]
    if x is None or w is None or r is None:
        raise ShapeError(f"op '{op.name}' (LSTM): inputs X, W and R are required")
    _, n_dirs = _directions(op)
    layout = int(attr(op, "layout"))
    if len(x) != 3 or len(w) != 3 or len(r) != 3:
        raise ShapeError(
            f"op '{op.name}' (LSTM): X, W, R must be rank 3; got {tuple(x)}, {tuple(w)}, {tuple(r)}"
        )
    hidden = _hidden(op, tuple(r))
    seq, batch = (x[0], x[1]) if layout == 0 else (x[1], x[0])
    want_w = (n_dirs, N_GATES * hidden, x[2])
    if tuple(w) != want_w or tuple(r) != (n_dirs, N_GATES * hidden, hidden):
        raise ShapeError(
            f"op '{op.name}' (LSTM): W {tuple(w)} and R {tuple(r)} do not fit X {tuple(x)} "
            f"with {n_dirs} direction(s) and hidden_size {hidden} (want W {want_w})"
        )
    if layout == 0:
        y: Shape = (seq, n_dirs, batch, hidden)
        state: Shape = (n_dirs, batch, hidden)
    else:
        y, state = (batch, seq, n_dirs, hidden), (batch, n_dirs, hidden)
    return [y, state, state][:n] + [None] * max(0, n - 3)


def _lstm(op: Op, inputs: Inputs) -> list[Array]:
    padded = list(inputs) + [None] * (8 - len(inputs))
    x, w, r, b, lens, h0, c0, p = padded[:8]
    assert x is not None and w is not None and r is not None
    direction, n_dirs = _directions(op)
    layout = int(attr(op, "layout"))
    hidden = _hidden(op, r.shape)
    acts = _activations(op, n_dirs)
    clip = op.attrs.get("clip")
    input_forget = bool(int(attr(op, "input_forget")))
    xs = np.asarray(x, np.float64)
    if layout == 1:
        xs = xs.transpose(1, 0, 2)
    seq, batch = xs.shape[0], xs.shape[1]
    if layout == 1:
        h0 = None if h0 is None else np.asarray(h0).transpose(1, 0, 2)
        c0 = None if c0 is None else np.asarray(c0).transpose(1, 0, 2)
    steps = np.full(batch, seq, np.int64) if lens is None else np.asarray(lens, np.int64)
    if steps.shape != (batch,) or (steps < 0).any() or (steps > seq).any():
        raise _error(op, f"sequence_lens {steps.tolist()} must hold {batch} lengths in [0, {seq}]")
    y = np.zeros((seq, n_dirs, batch, hidden), np.float64)
    y_h = np.zeros((n_dirs, batch, hidden), np.float64)
    y_c = np.zeros((n_dirs, batch, hidden), np.float64)
    for d in range(n_dirs):
        f, g, h = acts[3 * d : 3 * d + 3]
        wd = np.asarray(w[d], np.float64)
        rd = np.asarray(r[d], np.float64)
        bias = np.zeros(2 * N_GATES * hidden) if b is None else np.asarray(b[d], np.float64)
        bias = bias[: N_GATES * hidden] + bias[N_GATES * hidden :]
        peep = np.zeros(N_PEEPHOLES * hidden) if p is None else np.asarray(p[d], np.float64)
        p_i, p_o, p_f = np.split(peep, N_PEEPHOLES)
        state_h = np.zeros((batch, hidden)) if h0 is None else np.asarray(h0[d], np.float64)
        state_c = np.zeros((batch, hidden)) if c0 is None else np.asarray(c0[d], np.float64)
        projected = xs @ wd.T + bias  # [seq, batch, 4H]: the input's part of every step
        backward = direction == "reverse" or d == 1
        for t in range(seq - 1, -1, -1) if backward else range(seq):
            active = (t < steps)[:, None]
            gates = projected[t] + state_h @ rd.T
            gi, go, gf, gc = np.split(gates, N_GATES, axis=1)
            gi = gi + p_i * state_c
            gf = gf + p_f * state_c
            if clip is not None:
                gi, gf, gc = (np.clip(v, -float(clip), float(clip)) for v in (gi, gf, gc))
            i_t = f(gi)
            f_t = 1.0 - i_t if input_forget else f(gf)
            c_t = f_t * state_c + i_t * g(gc)
            go = go + p_o * c_t
            if clip is not None:
                go = np.clip(go, -float(clip), float(clip))
            h_t = f(go) * h(c_t)
            state_c = np.where(active, c_t, state_c)
            state_h = np.where(active, h_t, state_h)
            y[t, d] = np.where(active, h_t, 0.0)
        ran = (steps > 0)[:, None]  # a sequence of length 0 ends in zeros (onnxruntime's)
        y_h[d], y_c[d] = np.where(ran, state_h, 0.0), np.where(ran, state_c, 0.0)
    if layout == 1:
        return [
            y.transpose(2, 0, 1, 3).astype(DTYPE),
            y_h.transpose(1, 0, 2).astype(DTYPE),
            y_c.transpose(1, 0, 2).astype(DTYPE),
        ]
    return [y.astype(DTYPE), y_h.astype(DTYPE), y_c.astype(DTYPE)]


OPS = (
    OpDef(
        "LSTM",
        defaults={"direction": "forward", "layout": 0, "input_forget": 0},
        shape=_lstm_shape,
        reference=_lstm,
        barrier=RECURRENT_BARRIER,
    ),
)
