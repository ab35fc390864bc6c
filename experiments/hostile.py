"""A hostile user's afternoon with fusiontune, re-runnable (issue 24).

Every case runs ``python -m fusiontune.cli.main ...`` in a subprocess of its own (a scratch
folder, a timeout) and is classified:

- ``clean``: the documented exit (2 for bad input, 130 after Ctrl-C, 0 when the input is
  fine), stderr one line (or a few) starting ``fusiontune: error:`` that names the file, field
  or op at fault, no traceback;
- ``unclear``: the right exit, but the message does not name the thing at fault (or stderr has
  more than a few lines, or lines that are not fusiontune's);
- ``traceback``: a Python traceback or fusiontune's ``internal error`` (a bug);
- ``wrong exit``: another exit code (or a hang past the timeout);
- ``data loss``: trials stored before the fault are gone or changed afterwards.

The families: malformed ONNX, hardware YAML, search-space YAML, command-line values, paths, and
faults (Ctrl-C, SIGKILL, a full disk by a small tmpfs and by ``RLIMIT_FSIZE``, corrupt tables
and databases, torn journals, two drivers at once). The bad-input cases of
``tests/test_bad_input.py`` (the README's troubleshooting table) run too, and each README row is
compared with what the code prints today.

Writes ``results/hostile.md`` and ``results/hostile.csv``. Run from the repository root::

    nice -n 10 python experiments/hostile.py            # every case
    python experiments/hostile.py --only onnx,yaml      # some families
    python experiments/hostile.py --jobs 2              # cases in parallel (default 2)

Cases that need root (mounting a tmpfs) are skipped elsewhere, and say so.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import csv
import itertools
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
TIMEOUT_S = 180.0
"""Per command; the machine may be busy. A case past it is a ``wrong exit`` (hang)."""

MAX_ERROR_LINES = 3
"""A clean refusal is one line; a few (a fault and what was saved) are allowed."""

CLASSES = ("clean", "unclear", "traceback", "wrong exit", "data loss", "skipped")

sys.path.insert(0, str(ROOT))


# ---- running one command -------------------------------------------------------------------
@dataclass
class Outcome:
    """What one command did."""

    code: int | None  # None: killed at the timeout
    out: str
    err: str
    seconds: float


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("FUSIONTUNE_DEBUG", None)
    return env


def _preexec(fsize_bytes: int | None = None) -> Callable[[], None]:
    def setup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job inherits it ignored
        if fsize_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a death by signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes))

    return setup


def spawn(argv: list[str], cwd: Path, fsize_bytes: int | None = None) -> subprocess.Popen[str]:
    """``fusiontune ARGV`` started in its own process group (Ctrl-C goes to the group, as a
    terminal sends it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "fusiontune.cli.main", *argv],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        preexec_fn=_preexec(fsize_bytes),
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], start: float, timeout: float = TIMEOUT_S) -> Outcome:
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    with contextlib.suppress(ProcessLookupError):  # Ray workers left in the group
        os.killpg(proc.pid, signal.SIGKILL)
    return Outcome(code, out, err, time.monotonic() - start)


def cli(argv: list[str], cwd: Path, fsize_bytes: int | None = None,
        timeout: float = TIMEOUT_S) -> Outcome:  # fmt: skip
    start = time.monotonic()
    return finish(spawn(argv, cwd, fsize_bytes), start, timeout)


def wait_for(proc: subprocess.Popen[str], path: Path, timeout: float = TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---- cases -----------------------------------------------------------------------------------
@dataclass
class Case:
    """One hostile input.

    Attributes:
        id: short unique name.
        family: onnx, hw-yaml, space-yaml, cli, paths, faults or readme.
        argv: the command line after ``fusiontune`` (``{tmp}`` is the case's scratch folder);
            unused when ``run`` is given.
        files: files to create under the scratch folder first (name -> text or bytes).
        code: the documented exit.
        names: substrings the message must contain (the file, field or op at fault).
        run: a fault scenario: returns the outcome and a data-loss finding (``""``: none).
        readme: the README row this case produces (its "case" column), if any.
        needs_root: skipped unless root on Linux (mounting a tmpfs).
        max_lines: most stderr lines a clean outcome may have.
    """

    id: str
    family: str
    argv: tuple[str, ...] = ()
    files: dict[str, str | bytes] = field(default_factory=dict)
    code: int = 2
    names: tuple[str, ...] = ()
    run: Callable[[Path], tuple[Outcome, str]] | None = None
    readme: str = ""
    needs_root: bool = False
    max_lines: int = MAX_ERROR_LINES


@dataclass
class Result:
    case: Case
    cls: str
    why: str
    outcome: Outcome | None
    message: str = ""


def _materialise(case: Case, tmp: Path) -> list[str]:
    for name, content in case.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return [a.replace("{tmp}", str(tmp)) for a in case.argv]


def _is_noise(line: str) -> bool:
    """Progress lines a search prints on stderr (not errors)."""
    return line.startswith(("search: ", "fusiontune: warning: "))


def classify(case: Case, o: Outcome, lost: str) -> tuple[str, str]:
    text = o.err + o.out
    if "Traceback (most recent call last)" in text or "fusiontune: internal error" in text:
        first = next((ln for ln in o.err.splitlines() if "rror" in ln), "")
        return "traceback", first.strip()[:300]
    if lost:
        return "data loss", lost
    if o.code is None:
        return "wrong exit", f"no exit within {TIMEOUT_S:.0f} s (killed)"
    if o.code != case.code:
        return "wrong exit", f"exit {o.code}, documented {case.code}"
    lines = [ln for ln in o.err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if not _is_noise(ln)]
    if case.code == 0:
        if errors:
            return "unclear", f"stderr not fusiontune's: {errors[0][:200]}"
        return "clean", ""
    if not errors:
        return "unclear", "nothing on stderr"
    if not errors[0].startswith(("fusiontune: error: ", "fusiontune: interrupted")):
        return "unclear", f"first line is not fusiontune's: {errors[0][:200]}"
    if len(errors) > case.max_lines:
        return "unclear", f"{len(errors)} lines on stderr"
    missing = [n for n in case.names if n not in o.err]
    if missing:
        return "unclear", f"does not name {missing[0]!r}"
    return "clean", ""


def run_case(case: Case) -> Result:
    if case.needs_root and (sys.platform != "linux" or os.geteuid() != 0):
        return Result(case, "skipped", "needs root on Linux (tmpfs)", None)
    with tempfile.TemporaryDirectory(prefix="hostile-") as name:
        tmp = Path(name)
        try:
            if case.run is not None:
                _materialise(case, tmp)
                outcome, lost = case.run(tmp)
            else:
                outcome, lost = cli(_materialise(case, tmp), tmp), ""
        except Exception as exc:  # the harness's own failure: say so, do not stop
            return Result(case, "skipped", f"harness error: {type(exc).__name__}: {exc}", None)
        cls, why = classify(case, outcome, lost)
        message = " ".join(
            _unmachined(ln, tmp).removeprefix("fusiontune: error: ")
            for ln in outcome.err.splitlines()
            if ln.strip() and not _is_noise(ln)
        )
        why = _unmachined(why, tmp)
        _cleanup_mounts(tmp)
        return Result(case, cls, why, outcome, message)


def _unmachined(text: str, tmp: Path) -> str:
    """``text`` without this machine's paths (the scratch folder, the checkout, Python's)."""
    for prefix, shown in (
        (f"{tmp}/", ""),
        (f"{ROOT}/", ""),
        (f"{sys.prefix}/", "<venv>/"),
        (f"{sys.base_prefix}/", "<python>/"),
    ):
        text = text.replace(prefix, shown)
    return text


def _cleanup_mounts(tmp: Path) -> None:
    for disk in tmp.glob("disk*"):
        if os.path.ismount(disk):
            subprocess.run(["umount", "--lazy", str(disk)], check=False, capture_output=True)


# ---- ONNX ------------------------------------------------------------------------------------
def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None,
           opset: int = 17, **kw: object) -> bytes:  # fmt: skip
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)
    return model.SerializeToString()


def onnx_cases() -> list[Case]:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    node = helper.make_node

    def w(name: str, *shape: int, dtype: type = np.float32) -> TensorProto:
        return numpy_helper.from_array(np.ones(shape, dtype), name)

    relu = [node("Relu", ["x"], ["y"], name="relu")]
    valid = _model(relu, [vi("x", f, [1, 4])], [vi("y", f, [1, 4])])
    mm = [node("MatMul", ["x", "w"], ["y"], name="fc")]
    conv = [node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3])]
    x4 = vi("x", f, [1, 3, 8, 8])
    y_any = vi("y", f, None)
    bad_raw = w("w", 4, 4)
    bad_raw.raw_data = bad_raw.raw_data[:10]
    ext = w("w", 4, 4)
    ext.ClearField("raw_data")
    ext.data_location = TensorProto.EXTERNAL
    ext.external_data.add(key="location", value="weights.bin")
    no_shape = helper.make_tensor_value_info("x", f, None)
    no_type = helper.ValueInfoProto(name="x")
    chain = [node("Relu", ["x" if i == 0 else f"t{i}"], [f"t{i + 1}" if i < 1999 else "y"],
                  name=f"r{i}") for i in range(2000)]  # fmt: skip
    specs: list[tuple[str, bytes, int, tuple[str, ...]]] = [
        ("empty-file", b"", 2, ("m.onnx",)),
        ("truncated-1-byte", valid[:1], 2, ("m.onnx",)),
        ("truncated-90pc", valid[: len(valid) * 9 // 10], 2, ("m.onnx",)),
        ("random-bytes", bytes(range(256)) * 4, 2, ("m.onnx",)),
        (
            "zero-dim-input",
            _model(relu, [vi("x", f, [1, 0])], [vi("y", f, [1, 0])]),
            2,
            ("'x'", "dimension 1"),
        ),
        (
            "zero-dim-batch",
            _model(relu, [vi("x", f, [0, 4])], [vi("y", f, [0, 4])]),
            2,
            ("'x'", "dimension 0"),
        ),
        (
            "zero-dim-gemm-weight",
            _model(
                [node("Gemm", ["x", "w"], ["y"], name="fc")],
                [vi("x", f, [1, 4])],
                [y_any],
                [w("w", 4, 0)],
            ),
            2,
            ("'w'", "fc"),
        ),
        (
            "zero-dim-conv-weight",
            _model(conv, [x4], [y_any], [w("w", 0, 3, 3, 3)]),
            2,
            ("'w'", "conv"),
        ),
        (
            "float64-input",
            _model(
                relu, [vi("x", TensorProto.DOUBLE, [1, 4])], [vi("y", TensorProto.DOUBLE, [1, 4])]
            ),
            2,
            ("'x'",),
        ),
        (
            "int-weight-float-input",
            _model(mm, [vi("x", f, [1, 4])], [y_any], [w("w", 4, 4, dtype=np.int64)]),
            2,
            ("fc",),
        ),
        (
            "string-weight",
            _model(
                mm,
                [vi("x", f, [1, 4])],
                [y_any],
                [helper.make_tensor("w", TensorProto.STRING, [1], [b"a"])],
            ),
            2,
            ("fc",),
        ),
        (
            "attr-wrong-type",
            _model(
                [node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=1.5)],
                [x4],
                [y_any],
                [w("w", 4, 3, 3, 3)],
            ),
            2,
            ("conv",),
        ),
        (
            "self-loop",
            _model(
                [node("Relu", ["t"], ["t"], name="loop"), node("Relu", ["t"], ["y"], name="out")],
                [vi("x", f, [1, 4])],
                [vi("y", f, [1, 4])],
            ),
            2,
            ("cycle",),
        ),
        ("missing-initializer", _model(mm, [vi("x", f, [1, 4])], [y_any]), 2, ("'w'",)),
        (
            "output-never-produced",
            _model(relu, [vi("x", f, [1, 4])], [vi("z", f, [1, 4])]),
            2,
            ("'z'",),
        ),
        ("no-outputs", _model(relu, [vi("x", f, [1, 4])], []), 2, ("output",)),
        ("no-nodes", _model([], [vi("x", f, [1, 4])], [vi("x", f, [1, 4])]), 2, ("m.onnx",)),
        (
            "unknown-op",
            _model(
                [node("FooBar", ["x"], ["y"], name="foo")],
                [vi("x", f, [1, 4])],
                [vi("y", f, [1, 4])],
            ),
            0,
            (),
        ),
        (
            "custom-domain-op",
            _model(
                [node("Foo", ["x"], ["y"], name="foo", domain="acme")],
                [vi("x", f, [1, 4])],
                [vi("y", f, [1, 4])],
            ),
            2,
            ("'foo'",),
        ),
        ("conv-weight-rank-2", _model(conv, [x4], [y_any], [w("w", 4, 4)]), 2, ("conv",)),
        (
            "matmul-inner-mismatch",
            _model(mm, [vi("x", f, [1, 4])], [y_any], [w("w", 5, 3)]),
            2,
            ("fc",),
        ),
        (
            "reshape-impossible",
            _model(
                [node("Reshape", ["x", "s"], ["y"], name="rs")],
                [vi("x", f, [1, 4])],
                [y_any],
                [numpy_helper.from_array(np.array([3, 5], np.int64), "s")],
            ),
            2,
            ("rs",),
        ),
        (
            "conv-group-mismatch",
            _model(
                [node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3], group=2)],
                [x4],
                [y_any],
                [w("w", 4, 3, 3, 3)],
            ),
            2,
            ("conv",),
        ),
        (
            "conv-kernel-too-big",
            _model(
                [node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[9, 9])],
                [x4],
                [y_any],
                [w("w", 4, 3, 9, 9)],
            ),
            2,
            ("conv",),
        ),
        (
            "scalar-into-conv",
            _model(conv, [vi("x", f, [])], [y_any], [w("w", 4, 3, 3, 3)]),
            2,
            ("conv",),
        ),
        (
            "gather-index-out-of-range",
            _model(
                [node("Gather", ["w", "i"], ["y"], name="gather")],
                [vi("x", f, [1, 4])],
                [y_any],
                [w("w", 4, 4), numpy_helper.from_array(np.array([7], np.int64), "i")],
            ),
            0,
            (),
        ),
        (
            "opset-1",
            _model(relu, [vi("x", f, [1, 4])], [vi("y", f, [1, 4])], opset=1),
            0,
            (),
        ),
        (
            "opset-999",
            _model(relu, [vi("x", f, [1, 4])], [vi("y", f, [1, 4])], opset=999),
            2,
            ("m.onnx",),
        ),
        ("raw-data-too-short", _model(mm, [vi("x", f, [1, 4])], [y_any], [bad_raw]), 2, ("'w'",)),
        (
            "external-data-missing",
            _model(mm, [vi("x", f, [1, 4])], [y_any], [ext]),
            2,
            ("weights.bin",),
        ),
        (
            "duplicate-initializer",
            _model(mm, [vi("x", f, [1, 4])], [y_any], [w("w", 4, 4), w("w", 4, 4)]),
            2,
            ("'w'",),
        ),
        ("input-without-shape", _model(relu, [no_shape], [y_any]), 2, ("'x'",)),
        ("input-without-type", _model(relu, [no_type], [y_any]), 2, ("'x'",)),
        (
            "empty-input-name",
            _model(
                [node("Relu", [""], ["y"], name="relu")], [vi("x", f, [1, 4])], [vi("y", f, [1, 4])]
            ),
            2,
            ("relu",),
        ),
        ("chain-of-2000-relus", _model(chain, [vi("x", f, [1, 4])], [vi("y", f, [1, 4])]), 0, ()),
        (
            "huge-declared-input",
            _model(relu, [vi("x", f, [10**10, 10**10])], [vi("y", f, [10**10, 10**10])]),
            2,
            ("int64",),
        ),
    ]
    cases = [Case(f"onnx-{i}", "onnx", ("show", "{tmp}/m.onnx"), {"m.onnx": data}, code, names)
             for i, data, code, names in specs]  # fmt: skip
    data_of = {i: data for i, data, _, _ in specs}
    cases += [
        Case("onnx-dir-as-model", "onnx", ("show", "{tmp}/d.onnx"), {"d.onnx/x": ""}, 2,
             ("d.onnx",)),
        Case("onnx-search-zero-dim", "onnx",
             ("search", "{tmp}/m.onnx", "--workers", "1", "--trials", "2", "--out", "{tmp}/o"),
             {"m.onnx": data_of["zero-dim-input"]}, 2, ("'x'",)),
        Case("onnx-simulate-verify-unknown-op", "onnx", ("simulate", "{tmp}/m.onnx", "--verify"),
             {"m.onnx": data_of["unknown-op"]}, 2, ("FooBar",)),
        Case("onnx-verify-gather-out-of-range", "onnx",
             ("simulate", "{tmp}/m.onnx", "--verify"),
             {"m.onnx": data_of["gather-index-out-of-range"]}, 2, ("gather",)),
    ]  # fmt: skip
    return cases


# ---- hardware YAML ---------------------------------------------------------------------------
def bomb(levels: int = 9, key: str = "a") -> str:
    names = "abcdefghijklmnop"[:levels]
    lines = [f"\n  - &{names[0]} [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"\n  - &{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in itertools.pairwise(names)]
    return f"{key}:" + "".join(lines) + "\n"


def hw_cases() -> list[Case]:
    specs: list[tuple[str, str | bytes, tuple[str, ...]]] = [
        ("typo-key", "crossbar_row: 128\n", ("crossbar_row", "crossbar_rows")),
        ("string-for-int", "crossbar_rows: big\n", ("crossbar_rows",)),
        ("negative", "crossbar_rows: -128\n", ("crossbar_rows",)),
        ("fractional-int", "crossbar_rows: 128.5\n", ("crossbar_rows",)),
        ("bool-for-int", "crossbar_rows: true\n", ("crossbar_rows",)),
        ("huge-int", "crossbar_rows: 1000000000000000000000000000000\n", ("crossbar_rows",)),
        ("nan-energy", "dram_pj_per_bit: .nan\n", ("dram_pj_per_bit",)),
        ("inf-clock", "clock_ghz: .inf\n", ("clock_ghz",)),
        ("zero-clock", "clock_ghz: 0\n", ("clock_ghz",)),
        ("list-top-level", "- crossbar_rows: 128\n", ("hw.yaml",)),
        ("scalar-top-level", "42\n", ("hw.yaml",)),
        ("binary-garbage", bytes(range(256)), ("hw.yaml",)),
        ("bomb-valid-key", bomb(9, "buffer_bytes"), ("buffer_bytes",)),
        ("bomb-unknown-key", bomb(9, "bufer_bytes"), ("bufer_bytes",)),
        ("duplicate-key", "buffer_bytes: 1024\nbuffer_bytes: 2048\n", ("buffer_bytes",)),
        ("dac-above-act", "dac_bits: 8\nact_bits: 4\n", ("dac_bits",)),
        ("topology-unknown", "cores: 4\ntopology: torus\n", ("topology",)),
        ("zero-cores", "cores: 0\n", ("cores",)),
        ("mesh-width-not-dividing", "cores: 6\ntopology: mesh\nmesh_width: 4\n", ("mesh_width",)),
        ("adc-table-not-mapping", "adc_pj_by_bits: 5\n", ("adc_pj_by_bits",)),
        ("adc-table-string-keys", "adc_pj_by_bits: {eight: 1.0}\n", ("adc_pj_by_bits",)),
        ("python-tag", "crossbar_rows: !!python/object/apply:os.system [echo hi]\n", ("hw.yaml",)),
        ("tab-indent", "adc_pj_by_bits:\n\t8: 1.0\n", ("hw.yaml",)),
        ("dram-kind-unknown", "dram_kind: hbm9\n", ("dram_kind",)),
        ("name-not-string", "name: [1, 2]\n", ("name",)),
        ("deep-nesting", "a: " + "[" * 5000 + "]" * 5000 + "\n", ("hw.yaml",)),
        ("huge-file", "# " + "x" * (65 << 20) + "\n", ("hw.yaml",)),
    ]
    cases = [Case(f"hw-{i}", "hw-yaml", ("simulate", "mlp_relu", "--hw", "{tmp}/hw.yaml"),
                  {"hw.yaml": text}, 2, names) for i, text, names in specs]  # fmt: skip
    cases += [
        Case("hw-empty-file", "hw-yaml", ("simulate", "mlp_relu", "--hw", "{tmp}/hw.yaml"),
             {"hw.yaml": ""}, 0),
        Case("hw-unknown-preset", "hw-yaml", ("simulate", "mlp_relu", "--hw", "nosuchchip"),
             names=("nosuchchip",)),
        Case("hw-directory", "hw-yaml", ("simulate", "mlp_relu", "--hw", "{tmp}/d"),
             {"d/x": ""}, names=("d",)),
        Case("hw-missing-file", "hw-yaml", ("simulate", "mlp_relu", "--hw", "{tmp}/no.yaml"),
             names=("no.yaml",)),
        Case("hw-empty-arg", "hw-yaml", ("simulate", "mlp_relu", "--hw", ""),
             names=("hardware ''", "preset")),
    ]  # fmt: skip
    return cases


# ---- search spaces ---------------------------------------------------------------------------
SEARCH = ("search", "--workers", "1", "--trials", "2", "--out", "{tmp}/out")


def space_cases() -> list[Case]:
    specs: list[tuple[str, str | bytes, tuple[str, ...], int]] = [
        ("unknown-knob", "knobs:\n  adc_bitz: {low: 4, high: 8}\n", ("adc_bitz",), 2),
        ("low-above-high", "knobs:\n  adc_bits: {low: 8, high: 4}\n", ("adc_bits",), 2),
        (
            "choices-and-range",
            "knobs:\n  adc_bits: {low: 4, high: 8, choices: [4, 8]}\n",
            ("adc_bits",),
            2,
        ),
        ("empty-choices", "knobs:\n  adc_bits: {choices: []}\n", ("adc_bits",), 2),
        ("knob-spec-typo", "knobs:\n  adc_bits: {low: 4, hihg: 8}\n", ("hihg",), 2),
        ("knob-not-mapping", "knobs:\n  adc_bits: 8\n", ("adc_bits",), 2),
        ("knobs-a-list", "knobs:\n  - adc_bits\n", ("knobs",), 2),
        ("objective-unknown", "objective: speed\n", ("objective", "speed"), 2),
        ("sampler-unknown", "sampler: genius\n", ("sampler", "genius"), 2),
        ("trials-negative", "trials: -5\n", ("trials",), 2),
        ("trials-float", "trials: 1.0e9\n", ("trials",), 2),
        ("trials-bool", "trials: true\n", ("trials",), 2),
        ("max-group-zero", "max_group_size: 0\n", ("max_group_size",), 2),
        ("hardware-unknown", "hardware: nosuchchip\n", ("nosuchchip",), 2),
        ("constraints-unknown", "constraints:\n  speed: 3\n", ("speed",), 2),
        ("constraints-not-number", "constraints:\n  area_mm2: big\n", ("area_mm2",), 2),
        (
            "combo-dac-act",
            "knobs:\n  dac_bits: {choices: [2, 8]}\n  act_bits: {choices: [4, 8]}\n",
            ("dac_bits", "act_bits"),
            2,
        ),
        ("combo-adc-no-energy", "knobs:\n  adc_bits: {choices: [3, 8]}\n", ("adc_bits",), 2),
        (
            "combo-mesh-cores",
            "hardware: isaac_168\nknobs:\n  cores: {choices: [6, 8]}\n"
            "  mesh_width: {choices: [4]}\n",
            ("cores", "concentration"),
            2,
        ),
        ("step-zero", "knobs:\n  adc_bits: {low: 4, high: 8, step: 0}\n", ("adc_bits",), 2),
        (
            "log-negative",
            "knobs:\n  buffer_bytes: {low: -1, high: 1024, log: true}\n",
            ("buffer_bytes",),
            2,
        ),
        ("mixed-choices", "knobs:\n  adc_bits: {choices: [4, eight]}\n", ("adc_bits",), 2),
        ("bomb-trials", "trials:" + bomb(9)[2:], ("trials",), 2),
        (
            "bomb-knob",
            "knobs:\n  adc_bits:\n    choices:" + bomb(9)[2:].replace("\n  ", "\n      "),
            ("adc_bits",),
            2,
        ),
        ("empty-file", "", (), 0),
        ("only-comment", "# nothing\n", (), 0),
        ("top-level-list", "- trials\n", ("space.yaml",), 2),
        ("latin1", "trials: 4 # caf\xe9\n".encode("latin-1"), ("space.yaml",), 2),
        ("duplicate-key", "trials: 2\ntrials: 3000\n", ("trials",), 2),
        (
            "knob-fixed-value-bad",
            "knobs:\n  crossbar_rows: {choices: [0]}\n",
            ("crossbar_rows",),
            2,
        ),
    ]
    cases = [Case(f"space-{i}", "space-yaml", (*SEARCH, "--space", "{tmp}/space.yaml", "mlp_relu"),
                  {"space.yaml": text}, code, names) for i, text, names, code in specs]  # fmt: skip
    cases += [
        Case("space-directory", "space-yaml", (*SEARCH, "--space", "{tmp}/d", "mlp_relu"),
             {"d/x": ""}, names=("d",)),
        Case("space-missing", "space-yaml", (*SEARCH, "--space", "{tmp}/no.yaml", "mlp_relu"),
             names=("no.yaml",)),
    ]  # fmt: skip
    return cases


# ---- command-line values and paths -----------------------------------------------------------
def cli_cases() -> list[Case]:
    sim = ("simulate", "mlp_relu")
    specs: list[tuple[str, tuple[str, ...], tuple[str, ...], int]] = [
        ("input-size-zero", (*sim, "--input-size", "0"), ("--input-size",), 2),
        ("input-size-negative", (*sim, "--input-size", "-1"), ("--input-size",), 2),
        ("input-size-word", (*sim, "--input-size", "abc"), ("--input-size",), 2),
        ("input-size-fraction", (*sim, "--input-size", "1.5"), ("--input-size",), 2),
        ("input-size-exponent", (*sim, "--input-size", "1e3"), ("--input-size",), 2),
        ("input-size-empty", (*sim, "--input-size", ""), ("--input-size",), 2),
        (
            "input-size-20-digits",
            (*sim, "--input-size", "99999999999999999999"),
            ("--input-size",),
            2,
        ),
        ("input-size-above-max", (*sim, "--input-size", "1048577"), ("--input-size",), 2),
        (
            "input-size-lenet-too-small",
            ("simulate", "lenet5", "--input-size", "2"),
            ("input", "lenet5"),
            2,
        ),
        (
            "input-size-resnet18-huge",
            ("simulate", "resnet18", "--input-size", "1048576"),
            ("--input-size",),
            2,
        ),
        (
            "input-size-resnet18-20000",
            ("simulate", "resnet18", "--input-size", "20000"),
            ("--input-size",),
            2,
        ),
        (
            "input-size-vgg16-huge",
            ("simulate", "vgg16", "--input-size", "1048576"),
            ("--input-size",),
            2,
        ),
        (
            "input-size-bert-huge",
            ("simulate", "bert_encoder", "--input-size", "1048576"),
            ("--input-size",),
            2,
        ),
        (
            "input-size-llama-huge",
            ("simulate", "llama_tiny", "--input-size", "1048576"),
            ("--input-size",),
            2,
        ),
        (
            "input-size-mobilenet-huge",
            ("show", "mobilenet_v2", "--input-size", "1048576"),
            ("--input-size",),
            2,
        ),
        (
            "input-size-on-onnx",
            ("show", "{tmp}/m.onnx", "--input-size", "64"),
            ("--input-size",),
            2,
        ),
        ("batch-zero", (*sim, "--batch", "0"), ("--batch",), 2),
        ("batch-huge-resnet", ("simulate", "resnet18", "--batch", "1048576"), ("--batch",), 2),
        (
            "trials-zero",
            ("search", "mlp_relu", "--trials", "0", "--out", "{tmp}/o"),
            ("--trials",),
            2,
        ),
        (
            "trials-negative",
            ("search", "mlp_relu", "--trials", "-3", "--out", "{tmp}/o"),
            ("--trials",),
            2,
        ),
        (
            "trials-word",
            ("search", "mlp_relu", "--trials", "many", "--out", "{tmp}/o"),
            ("--trials",),
            2,
        ),
        (
            "trials-10e30",
            ("search", "mlp_relu", "--trials", "1" + "0" * 30, "--out", "{tmp}/o"),
            ("--trials",),
            2,
        ),
        (
            "trials-fraction",
            ("search", "mlp_relu", "--trials", "2.5", "--out", "{tmp}/o"),
            ("--trials",),
            2,
        ),
        (
            "workers-word",
            ("search", "mlp_relu", "--workers", "two", "--out", "{tmp}/o"),
            ("--workers",),
            2,
        ),
        ("seed-word", ("search", "mlp_relu", "--seed", "x", "--out", "{tmp}/o"), ("--seed",), 2),
        (
            "eval-timeout-zero-no-limit",
            ("search", "mlp_relu", "--eval-timeout", "0", "--trials", "2", "--out", "{tmp}/o"),
            (),
            0,
        ),
        (
            "eval-timeout-nan",
            ("search", "mlp_relu", "--eval-timeout", "nan", "--out", "{tmp}/o"),
            ("--eval-timeout",),
            2,
        ),
        (
            "checkpoint-negative",
            ("search", "mlp_relu", "--checkpoint-every", "-1", "--out", "{tmp}/o"),
            ("--checkpoint-every",),
            2,
        ),
        (
            "checkpoint-inf",
            ("search", "mlp_relu", "--checkpoint-every", "inf", "--out", "{tmp}/o"),
            ("--checkpoint-every",),
            2,
        ),
        ("memory-limit-zero", ("show", "mlp_relu", "--memory-limit", "0"), ("--memory-limit",), 2),
        (
            "memory-limit-400-digits",
            ("show", "mlp_relu", "--memory-limit", "1" + "0" * 400),
            (),
            0,
        ),
        (
            "memory-limit-above-the-machine",
            ("simulate", "vgg16", "--input-size", "20000", "--memory-limit", "1" + "0" * 30),
            ("--input-size",),
            2,
        ),
        (
            "memory-limit-tiny",
            ("simulate", "vgg16", "--memory-limit", "1KB"),
            ("--memory-limit",),
            2,
        ),
        (
            "input-shape-empty-dims",
            ("show", "{tmp}/m.onnx", "--input-shape", "x="),
            ("--input-shape",),
            2,
        ),
        (
            "input-shape-letters",
            ("show", "{tmp}/m.onnx", "--input-shape", "x=1,a"),
            ("--input-shape",),
            2,
        ),
        (
            "input-shape-no-name",
            ("show", "{tmp}/m.onnx", "--input-shape", "=1,4"),
            ("--input-shape",),
            2,
        ),
        (
            "input-shape-unknown-input",
            ("show", "{tmp}/m.onnx", "--input-shape", "q=1,4"),
            ("'q'",),
            2,
        ),
        ("input-shape-zero", ("show", "{tmp}/m.onnx", "--input-shape", "x=0,4"), ("'x=0,4'",), 2),
        (
            "input-shape-wrong-rank",
            ("show", "{tmp}/m.onnx", "--input-shape", "x=1,4,4"),
            ("'x'",),
            2,
        ),
        (
            "objective-unknown",
            ("search", "mlp_relu", "--objective", "speed", "--out", "{tmp}/o"),
            ("--objective",),
            2,
        ),
        (
            "sampler-unknown",
            ("search", "mlp_relu", "--sampler", "genius", "--out", "{tmp}/o"),
            ("--sampler",),
            2,
        ),
        (
            "backend-unknown",
            ("search", "mlp_relu", "--backend", "slurm", "--out", "{tmp}/o"),
            ("--backend",),
            2,
        ),
        ("plan-garbage", (*sim, "--plan", "{tmp}/p.json"), ("p.json",), 2),
        ("plan-directory", (*sim, "--plan", "{tmp}/d"), ("d",), 2),
        ("plan-empty-object", (*sim, "--plan", "{tmp}/e.json"), ("e.json",), 2),
        ("no-subcommand", (), (), 2),
        ("unknown-subcommand", ("fuse", "mlp_relu"), ("fuse",), 2),
        ("empty-model-name", ("show", ""), ("model",), 2),
        ("model-unknown-ext", ("show", "{tmp}/model.pt"), ("model.pt",), 2),
        ("report-missing-dir", ("report", "{tmp}/nothere"), ("nothere",), 2),
        ("report-a-file", ("report", "{tmp}/p.json"), ("p.json",), 2),
        ("report-empty-dir", ("report", "{tmp}/d"), ("d",), 2),
        ("export-to-directory", ("export", "mlp_relu", "-o", "{tmp}/d"), ("d",), 2),
        (
            "storage-unknown-scheme",
            ("search", "mlp_relu", "--trials", "2", "--storage", "foo://x", "--out", "{tmp}/o"),
            ("foo://x",),
            2,
        ),
        (
            "storage-journal-is-dir",
            ("search", "mlp_relu", "--trials", "2", "--storage", "{tmp}/d.log", "--out", "{tmp}/o"),
            ("d.log",),
            2,
        ),
        (
            "out-deep-new-path",
            ("search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", "{tmp}/a/b/c"),
            (),
            0,
        ),
    ]
    files: dict[str, str | bytes] = {
        "p.json": "{not json", "e.json": "{}", "d/x": "", "d.log/x": "", "model.pt": "x",
        "m.onnx": _relu_model(),
    }  # fmt: skip
    return [Case(f"cli-{i}", "cli", argv, dict(files), code, names)
            for i, argv, names, code in specs]  # fmt: skip


def _relu_model() -> bytes:
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return _model(relu, [vi("x", TensorProto.FLOAT, [1, 4])], [vi("y", TensorProto.FLOAT, [1, 4])])


def path_cases() -> list[Case]:
    """Unwritable places: a read-only tmpfs (root bypasses permissions, a read-only mount does
    not)."""

    def read_only(argv: list[str], names: tuple[str, ...]) -> Callable[[Path], tuple[Outcome, str]]:
        def run(tmp: Path) -> tuple[Outcome, str]:
            disk = tmp / "disk"
            disk.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(disk)],
                           check=True, capture_output=True)  # fmt: skip
            return cli([a.replace("{tmp}", str(tmp)) for a in argv], tmp), ""

        return run

    specs = [
        ("search-out-read-only", ["search", "mlp_relu", "--workers", "1", "--trials", "2",
                                  "--out", "{tmp}/disk"], ("disk",)),
        ("search-journal-read-only", ["search", "mlp_relu", "--workers", "1", "--trials", "2",
                                      "--out", "{tmp}/o", "--storage", "{tmp}/disk/s.log"],
         ("s.log",)),
        ("search-sqlite-read-only", ["search", "mlp_relu", "--workers", "1", "--trials", "2",
                                     "--out", "{tmp}/o", "--storage",
                                     "sqlite:///{tmp}/disk/s.db"], ("s.db",)),
        ("export-read-only", ["export", "mlp_relu", "-o", "{tmp}/disk/m.onnx"], ("m.onnx",)),
        ("plans-out-read-only", ["plans", "mlp_relu", "--out", "{tmp}/disk/p.json"], ("p.json",)),
        ("export-schedule-read-only", ["export", "mlp_relu", "--format", "schedule", "-o",
                                       "{tmp}/disk/s.json"], ("s.json",)),
    ]  # fmt: skip
    return [Case(f"paths-{i}", "paths", run=read_only(argv, names), names=names, needs_root=True)
            for i, argv, names in specs]  # fmt: skip


# ---- faults ----------------------------------------------------------------------------------
def _search_argv(out: Path, trials: int = 100_000, model: str = "lenet5",
                 extra: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    return ["search", model, "--backend", "serial", "--workers", "1", "--sampler", "random",
            "--trials", str(trials), "--checkpoint-every", "0.2", "--out", str(out),
            "--seed", "0", *extra]  # fmt: skip


def _search_rows(table: Path) -> dict[int, str]:
    """Search trials of a table: number -> plan hash ({} when unreadable)."""
    from fusiontune.search.results import read_parquet

    try:
        frame = read_parquet(table)
    except Exception:
        return {}
    frame = frame[frame["source"] == "search"]
    return {int(t): str(h) for t, h in zip(frame["trial"], frame["plan_hash"], strict=True)}


def _lost(before: dict[int, str], after: dict[int, str]) -> str:
    gone = [t for t in before if t not in after]
    changed = [t for t in before if t in after and after[t] != before[t]]
    if gone or changed:
        return f"{len(gone)} stored trials gone, {len(changed)} changed (of {len(before)})"
    return ""


def _resume_and_compare(tmp: Path, argv: list[str], table: Path,
                        before: dict[int, str]) -> str:  # fmt: skip
    """Rerun with --resume (a few more trials); the finding if stored trials were lost."""
    resumed = argv[:]
    resumed[resumed.index("--trials") + 1] = str(len(before) + 5)
    o = cli([*resumed, "--resume"], tmp)
    if o.code != 0:
        return f"--resume after the fault failed (exit {o.code}): {o.err.strip()[-300:]}"
    return _lost(before, _search_rows(table))


def ctrl_c(
    times: int, delay_s: float = 0.0, workers: int = 1
) -> Callable[[Path], tuple[Outcome, str]]:
    def run(tmp: Path) -> tuple[Outcome, str]:
        out = tmp / "out"
        extra: tuple[str, ...] = ()
        argv = _search_argv(out)
        if workers > 1:
            argv[argv.index("serial")] = "ray"
            argv[argv.index("--workers") + 1] = str(workers)
            extra = ()
        table = out / "lenet5" / "trials.parquet"
        start = time.monotonic()
        proc = spawn([*argv, *extra], tmp)
        if delay_s:
            time.sleep(delay_s)
        elif not wait_for(proc, table):
            return finish(proc, start), ""
        for i in range(times):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.02 if i < times - 1 else 0)
        o = finish(proc, start)
        if o.code != 130 or not table.exists():
            return o, ""
        before = _search_rows(table)
        m = re.search(r"(\d+) finished trials are saved", o.err)
        if m and int(m.group(1)) != len(before):
            return o, f"said {m.group(1)} trials saved, trials.parquet has {len(before)}"
        return o, _resume_and_compare(tmp, argv, table, before)

    return run


def sigkill(tmp: Path) -> tuple[Outcome, str]:
    out = tmp / "out"
    argv = _search_argv(out)
    table = out / "lenet5" / "trials.parquet"
    start = time.monotonic()
    proc = spawn(argv, tmp)
    if not wait_for(proc, table):
        return finish(proc, start), ""
    time.sleep(1.0)
    shutil.copy(table, tmp / "copy.parquet")
    before = _search_rows(tmp / "copy.parquet")
    os.killpg(proc.pid, signal.SIGKILL)
    finish(proc, start)
    lost = _resume_and_compare(tmp, argv, table, before)
    return Outcome(0, "", "", time.monotonic() - start), lost


def disk_full_tmpfs(tmp: Path) -> tuple[Outcome, str]:
    disk = tmp / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], check=True,
                   capture_output=True)  # fmt: skip
    argv = _search_argv(disk)
    table = disk / "lenet5" / "trials.parquet"
    start = time.monotonic()
    proc = spawn(argv, tmp)
    if not wait_for(proc, table):
        return finish(proc, start), ""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
    o = finish(proc, start)
    before = _search_rows(table)
    filler.unlink()
    if o.code != 2:
        return o, ""
    return o, _resume_and_compare(tmp, argv, table, before)


def disk_full_at_creation(tmp: Path) -> tuple[Outcome, str]:
    disk = tmp / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True,
                   capture_output=True)  # fmt: skip
    with open(disk / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    os.truncate(disk / "filler", max(0, (disk / "filler").stat().st_size - (16 << 10)))
    return cli(
        ["search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", str(disk)], tmp
    ), ""


def fsize_limit(limit_bytes: int) -> Callable[[Path], tuple[Outcome, str]]:
    """A file-size ulimit: writes past it fail with EFBIG (a quota, a full disk of sorts)."""

    def run(tmp: Path) -> tuple[Outcome, str]:
        out = tmp / "out"
        argv = _search_argv(out, trials=2000)
        table = out / "lenet5" / "trials.parquet"
        o = cli(argv, tmp, fsize_bytes=limit_bytes)
        before = _search_rows(table)
        if o.code != 2 or not before:
            return o, ""
        return o, _resume_and_compare(tmp, argv, table, before)

    return run


def _finished(tmp: Path, extra: tuple[str, ...] = (), trials: int = 3) -> tuple[Path, list[str]]:
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", str(trials), "--seed", "0",
            "--out", str(tmp / "out"), *extra]  # fmt: skip
    o = cli(argv, tmp)
    if o.code != 0:
        raise RuntimeError(f"setup search failed: {o.err[-300:]}")
    return tmp / "out" / "mlp_relu", argv


def damaged_table(name: str, damage: str, rebuild: bool) -> Callable[[Path], tuple[Outcome, str]]:
    def run(tmp: Path) -> tuple[Outcome, str]:
        d, _ = _finished(tmp)
        table = d / name
        before = _search_rows(d / "trials.parquet")
        data = table.read_bytes()
        table.write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                           "garbage": b"x" * 100}[damage])  # fmt: skip
        o = cli(["report", str(d)], tmp)
        if not rebuild or o.code != 2:
            return o, ""
        r = cli(["report", str(d), "--rebuild"], tmp)
        if r.code != 0:
            return r, ""
        return o, _lost(before, _search_rows(d / "trials.parquet"))

    return run


def damaged_summary(tmp: Path) -> tuple[Outcome, str]:
    d, _ = _finished(tmp)
    (d / "summary.json").write_text('{"study": ')
    return cli(["report", str(d)], tmp), ""


def damaged_db(damage: str) -> Callable[[Path], tuple[Outcome, str]]:
    def run(tmp: Path) -> tuple[Outcome, str]:
        d, argv = _finished(tmp)
        db = d / "study.db"
        data = db.read_bytes()
        db.write_bytes({"garbage": b"x" * 4096, "truncated": data[: len(data) // 3],
                        "empty": b""}[damage])  # fmt: skip
        argv[argv.index("--trials") + 1] = "5"
        return cli([*argv, "--resume"], tmp), ""

    return run


def journal_fault(kind: str) -> Callable[[Path], tuple[Outcome, str]]:
    def run(tmp: Path) -> tuple[Outcome, str]:
        d, argv = _finished(tmp, ("--storage", str(tmp / "s.log")))
        journal = tmp / "s.log"
        before = _search_rows(d / "trials.parquet")
        data = journal.read_bytes()
        if kind == "torn-tail":
            journal.write_bytes(data[:-40])
            before.pop(max(before), None)  # the torn record's trial: Optuna never read it whole
        elif kind == "torn-middle":
            lines = data.splitlines(keepends=True)
            k = len(lines) // 2
            lines[k] = lines[k][: len(lines[k]) // 2] + b"\n"
            journal.write_bytes(b"".join(lines))
        elif kind == "garbage":
            journal.write_bytes(b"\x00\x01garbage")
        argv[argv.index("--trials") + 1] = "5"
        o = cli([*argv, "--resume"], tmp)
        if o.code != 0 or kind != "torn-tail":
            return o, ""
        after = _search_rows(d / "trials.parquet")
        return o, "" if len(after) == 5 and len(before) >= 1 else f"{len(after)} trials after"

    return run


def two_drivers(storage: str) -> Callable[[Path], tuple[Outcome, str]]:
    def run(tmp: Path) -> tuple[Outcome, str]:
        argv = ["search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", "out",
                "--study", "s", "--seed", "0"]  # fmt: skip
        if storage == "journal":
            argv += ["--storage", "shared/s.log"]
        start = time.monotonic()
        procs = [spawn(argv, tmp) for _ in range(2)]
        outcomes = [finish(p, start) for p in procs]
        codes = sorted(o.code if o.code is not None else -1 for o in outcomes)
        rows = _search_rows(tmp / "out" / "s" / "trials.parquet")
        loser = next((o for o in outcomes if o.code != 0), outcomes[1])
        if codes == [0, 0]:  # one ran after the other: fine if the second resumed... it cannot
            return Outcome(2, "", "fusiontune: error: both drivers ran (s)", 0.0), (
                "" if len(rows) >= 2 else "trials lost"
            )
        if codes != [0, 2]:
            return Outcome(codes[-1], loser.out, loser.err, loser.seconds), ""
        return loser, "" if len(rows) == 2 else f"{len(rows)} search trials kept, expected 2"

    return run


def resume_other(extra: tuple[str, ...]) -> Callable[[Path], tuple[Outcome, str]]:
    def run(tmp: Path) -> tuple[Outcome, str]:
        _, argv = _finished(tmp)
        changed = [*argv[:1], "mlp_wide" if "mlp" in extra else argv[1], *argv[2:]]
        changed[changed.index("--trials") + 1] = "5"
        if "mlp" not in extra:
            changed += list(extra)
        changed += ["--study", "mlp_relu", "--resume"]
        return cli(changed, tmp), ""

    return run


def resume_while_running(tmp: Path) -> tuple[Outcome, str]:
    out = tmp / "out"
    argv = _search_argv(out)
    table = out / "lenet5" / "trials.parquet"
    start = time.monotonic()
    proc = spawn(argv, tmp)
    if not wait_for(proc, table):
        return finish(proc, start), ""
    o = cli([*argv, "--resume"], tmp)
    os.killpg(proc.pid, signal.SIGINT)
    finish(proc, start)
    return o, ""


def stale_lock(tmp: Path) -> tuple[Outcome, str]:
    d, argv = _finished(tmp)
    before = _search_rows(d / "trials.parquet")
    (d / "study.db.lock").write_text("999999\n")  # a killed driver's pid
    argv[argv.index("--trials") + 1] = "5"
    o = cli([*argv, "--resume"], tmp)
    return o, _lost(before, _search_rows(d / "trials.parquet")) if o.code == 0 else ""


def deleted_table_resume(tmp: Path) -> tuple[Outcome, str]:
    d, argv = _finished(tmp)
    before = _search_rows(d / "trials.parquet")
    (d / "trials.parquet").unlink()
    argv[argv.index("--trials") + 1] = "5"
    o = cli([*argv, "--resume"], tmp)
    return o, _lost(before, _search_rows(d / "trials.parquet")) if o.code == 0 else ""


def fault_cases() -> list[Case]:
    interrupted = ("interrupted", "saved")
    return [
        Case("ctrl-c-once", "faults", run=ctrl_c(1), code=130, names=interrupted),
        Case("ctrl-c-twice", "faults", run=ctrl_c(2), code=130, names=interrupted),
        Case("ctrl-c-ten-times", "faults", run=ctrl_c(10), code=130, names=interrupted),
        Case("ctrl-c-at-start-0.3s", "faults", run=ctrl_c(1, 0.3), code=130,
             names=("interrupted",)),
        Case("ctrl-c-at-start-1.5s", "faults", run=ctrl_c(1, 1.5), code=130,
             names=("interrupted",)),
        Case("ctrl-c-ray-workers", "faults", run=ctrl_c(1, workers=2), code=130,
             names=interrupted),
        Case("ctrl-c-ray-twice", "faults", run=ctrl_c(3, workers=2), code=130,
             names=interrupted),
        Case("sigkill-then-resume", "faults", run=sigkill, code=0),
        Case("disk-full-tmpfs", "faults", run=disk_full_tmpfs, names=("disk full", "--resume"),
             needs_root=True, max_lines=1),
        Case("disk-full-at-creation", "faults", run=disk_full_at_creation,
             names=("study.db", "disk full"), needs_root=True, max_lines=1),
        Case("fsize-limit-64k", "faults", run=fsize_limit(64 << 10),
             names=("study.db", "file-size limit"), max_lines=1),
        Case("fsize-limit-300k", "faults", run=fsize_limit(300 << 10), names=("--resume",),
             max_lines=1),
        Case("trials-parquet-truncated", "faults", run=damaged_table("trials.parquet",
             "truncated", True), names=("trials.parquet", "--rebuild")),
        Case("trials-parquet-empty", "faults", run=damaged_table("trials.parquet", "empty", True),
             names=("trials.parquet", "--rebuild")),
        Case("trials-parquet-garbage", "faults", run=damaged_table("trials.parquet", "garbage",
             True), names=("trials.parquet", "--rebuild")),
        Case("groups-parquet-garbage", "faults", run=damaged_table("groups.parquet", "garbage",
             False), names=("groups.parquet", "--resume")),
        Case("summary-json-torn", "faults", run=damaged_summary, names=("summary.json",)),
        Case("study-db-garbage", "faults", run=damaged_db("garbage"), names=("study.db",)),
        Case("study-db-truncated", "faults", run=damaged_db("truncated"), names=("study.db",)),
        Case("study-db-empty", "faults", run=damaged_db("empty"), names=("study.db",)),
        Case("journal-torn-tail", "faults", run=journal_fault("torn-tail"), code=0),
        Case("journal-torn-middle", "faults", run=journal_fault("torn-middle"),
             names=("s.log", "truncate -s")),
        Case("journal-garbage", "faults", run=journal_fault("garbage"), names=("s.log",)),
        Case("two-drivers-sqlite", "faults", run=two_drivers("sqlite"),
             names=("'s'", "--resume")),
        Case("two-drivers-journal", "faults", run=two_drivers("journal"),
             names=("'s'", "--resume")),
        Case("resume-other-model", "faults", run=resume_other(("mlp",)),
             names=("mlp_wide", "mlp_relu")),
        Case("resume-other-hw", "faults", run=resume_other(("--hw", "sram_edge")),
             names=("sram_edge",)),
        Case("resume-other-objective", "faults", run=resume_other(("--objective", "energy")),
             names=("energy",)),
        Case("resume-while-running", "faults", run=resume_while_running,
             names=("lenet5", "in use")),
        Case("stale-lock-resume", "faults", run=stale_lock, code=0),
        Case("deleted-table-resume", "faults", run=deleted_table_resume, code=0),
    ]  # fmt: skip


# ---- the README's table ------------------------------------------------------------------------
def readme_cases() -> list[Case]:
    from experiments.gen_troubleshooting import load_cases_module

    module = load_cases_module()
    return [
        Case(f"readme-{c.id}", "readme", tuple(a.replace("{tmp}", "{tmp}") for a in c.argv),
             dict(c.files), c.code, (c.expect,), readme=c.what)
        for c in module.CASES
    ]  # fmt: skip


def readme_rows() -> dict[str, str]:
    """README troubleshooting rows: case column -> message column (as printed, unescaped)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- troubleshooting:start -->")[1].split("<!-- troubleshooting:end -->")[0]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0] not in ("case", "---"):
            rows[cells[0]] = cells[2]
    return rows


FAMILIES: dict[str, Callable[[], list[Case]]] = {
    "onnx": onnx_cases, "hw-yaml": hw_cases, "space-yaml": space_cases, "cli": cli_cases,
    "paths": path_cases, "faults": fault_cases, "readme": readme_cases,
}  # fmt: skip


# ---- report ----------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")[:400]


def _before_section(before_csv: Path, label: str, results: list[Result]) -> list[str]:
    """The same cases run on an earlier tree (its CSV): counts side by side, and what changed."""
    with open(before_csv, newline="") as f:
        before = {row["case"]: row for row in csv.DictReader(f)}
    ids = {r.case.id for r in results}
    counts = Counter(row["class"] for case, row in before.items() if case in ids)
    now = Counter(r.cls for r in results)
    fixed = [r.case.id for r in results if r.cls == "clean" and
             before.get(r.case.id, {}).get("class", "clean") != "clean"]  # fmt: skip
    lines = [
        "",
        f"## Before and after the fixes ({label})",
        "",
        "| class | before | after |",
        "|---|---|---|",
        *[f"| {c} | {counts.get(c, 0)} | {now.get(c, 0)} |" for c in CLASSES],
        "",
        f"Not clean before, clean now ({len(fixed)}):",
        "",
        "| case | before | what it printed then |",
        "|---|---|---|",
        *[
            f"| {i} | {before[i]['class']}: {_cell(before[i]['why'])} | "
            f"{_cell(before[i]['stderr'])} |"
            for i in fixed
        ],
    ]
    return lines


def report(results: list[Result], stale: list[tuple[str, str, str]], seconds: float) -> str:
    counts = Counter(r.cls for r in results)
    by_family: dict[str, Counter[str]] = {}
    for r in results:
        by_family.setdefault(r.case.family, Counter())[r.cls] += 1
    lines = [
        "# Hostile harness (issue 24)",
        "",
        f"`python experiments/hostile.py`: {len(results)} cases, each a `python -m "
        f"fusiontune.cli.main` subprocess with a {TIMEOUT_S:.0f} s timeout; {seconds:.0f} s.",
        "",
        "| class | cases |",
        "|---|---|",
        *[f"| {c} | {counts.get(c, 0)} |" for c in CLASSES],
        "",
        "| family | " + " | ".join(CLASSES) + " |",
        "|---|" + "---|" * len(CLASSES),
        *[
            f"| {fam} | " + " | ".join(str(c.get(k, 0)) for k in CLASSES) + " |"
            for fam, c in by_family.items()
        ],
        "",
        "## Cases that are not clean",
        "",
    ]
    bad = [r for r in results if r.cls != "clean"]
    if bad:
        lines += ["| case | class | why | stderr |", "|---|---|---|---|"]
        lines += [f"| {r.case.id} | {r.cls} | {_cell(r.why)} | {_cell(r.message)} |" for r in bad]
    else:
        lines.append("None.")
    lines += ["", "## README troubleshooting rows", ""]
    if stale:
        lines += ["| row | README says | the code prints |", "|---|---|---|"]
        lines += [f"| {_cell(w)} | {_cell(a)} | {_cell(b)} |" for w, a, b in stale]
    else:
        n = sum(1 for r in results if r.case.readme)
        lines.append(f"All {n} rows checked say what the code prints today.")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--only", default="", help="families, comma-separated: " + ", ".join(FAMILIES)
    )
    parser.add_argument("--case", default="", help="run the cases whose id contains this")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "hostile"), help="path stem of .md/.csv")
    parser.add_argument("--before", default="", help="CSV of a run on an earlier tree")
    parser.add_argument("--before-label", default="an earlier tree", help="what --before ran on")
    args = parser.parse_args()
    families = [f for f in args.only.split(",") if f] or list(FAMILIES)
    cases = [c for fam in families for c in FAMILIES[fam]() if args.case in c.id]
    assert len({c.id for c in cases}) == len(cases), "duplicate case ids"
    start = time.monotonic()
    results: list[Result] = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for r in pool.map(run_case, cases):
            results.append(r)
            code = "-" if r.outcome is None else r.outcome.code
            print(f"{r.cls:10} {r.case.id:45} exit {code}  {r.why[:120]}", flush=True)
    rows = readme_rows()
    stale = [
        (r.case.readme, rows.get(r.case.readme, "(no row)"), r.message)
        for r in results
        if r.case.readme
        and " ".join(rows.get(r.case.readme, "").split()) != " ".join(r.message.split())
    ]
    text = report(results, stale, time.monotonic() - start)
    if args.before:
        text += "\n".join(_before_section(Path(args.before), args.before_label, results)) + "\n"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["case", "family", "class", "exit", "expected_exit", "seconds", "why",
                         "stderr"])  # fmt: skip
        for r in results:
            o = r.outcome
            writer.writerow([r.case.id, r.case.family, r.cls, "" if o is None else o.code,
                             r.case.code, "" if o is None else f"{o.seconds:.1f}", r.why,
                             r.message[:1000]])  # fmt: skip
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
