"""Bad input on the command line: one clear line (what, where, what is allowed), a non-zero
exit and never a traceback.

:data:`CASES` is also the source of the README's troubleshooting table
(``experiments/gen_troubleshooting.py`` imports it), so every row there is a tested case.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fusiontune.cli.main import main

TMP = "{tmp}"
"""Placeholder in a case's argv for the test's temporary folder."""

EXIT_USER_ERROR = 2
"""Exit code of a FusiontuneError (cli/main.py)."""

EXIT_UNEXPECTED = 1
"""Exit code of an unexpected exception (cli/main.py)."""


def _onnx_bytes(kind: str) -> bytes:
    """Small hand-made ONNX models that break one rule each."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    inits: list[TensorProto] = []
    if kind == "valid":
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    elif kind == "cycle":  # a -> b -> a
        nodes = [
            helper.make_node("Add", ["x", "b_out"], ["a_out"], name="a"),
            helper.make_node("Relu", ["a_out"], ["b_out"], name="b"),
            helper.make_node("Relu", ["a_out"], ["y"], name="c"),
        ]
    elif kind == "twice":  # t produced by two nodes
        nodes = [
            helper.make_node("Relu", ["x"], ["t"], name="r1"),
            helper.make_node("Sigmoid", ["x"], ["t"], name="r2"),
            helper.make_node("Relu", ["t"], ["y"], name="r3"),
        ]
    elif kind == "dynamic":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    elif kind == "huge-weight":  # a weight declared with 10^9 output channels (no data)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[10**9, 4, 1, 1])
        inits.append(weight)
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    elif kind == "wide-input":  # 10^9 floats per input: fine to analyse, not to execute
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10**9])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10**9])
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    elif kind == "string-input":
        x = helper.make_tensor_value_info("x", TensorProto.STRING, [1, 4])
        nodes = [helper.make_node("Identity", ["x"], ["y"], name="id")]
    elif kind == "negative-dim":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, -3])
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    elif kind == "zero-weight":  # a MatMul weight with 0 rows
        inits.append(helper.make_tensor("w", TensorProto.FLOAT, [0, 4], []))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    elif kind == "attribute-type":  # Softmax's axis (an INT) given as a float
        nodes = [helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=1.0)]
    elif kind == "int-weight":  # a float input times an int64 weight
        inits.append(helper.make_tensor("w", TensorProto.INT64, [4, 4], [1] * 16))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    else:
        raise ValueError(kind)
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


ALIAS_BOMB = "".join(
    [
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n",
        *(f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi")),
        "trials: *i\n",
    ]
)
"""Nine levels of ten aliases: 10^10 nodes once expanded, in about 350 bytes."""


def _plan(groups: list[tuple[list[str], str]]) -> str:
    return json.dumps({"groups": [{"ops": ops, "mode": mode} for ops, mode in groups]})


# mlp_relu: fc1 -> fc1.relu -> fc2 -> fc2.relu -> fc3 (Gemm, Relu); `fusiontune show mlp_relu`
REST = [(["fc2"], "single"), (["fc2.relu"], "single"), (["fc3"], "single")]


@dataclass(frozen=True)
class Case:
    """One bad input.

    Attributes:
        id: short name (pytest id and README row).
        what: the mistake, for people (README column "case").
        argv: command line after ``fusiontune``; ``{tmp}`` is the test's temporary folder.
        expect: substring the one-line message must contain.
        fix: what the user should do (README column "fix").
        files: files to create under ``{tmp}`` first: name -> text or bytes.
        code: expected exit code.
    """

    id: str
    what: str
    argv: tuple[str, ...]
    expect: str
    fix: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    code: int = EXIT_USER_ERROR


def _cases() -> list[Case]:
    valid = _onnx_bytes("valid")
    search = ("search", "--workers", "1", "--trials", "4", "--out", f"{TMP}/out")
    return [
        Case(
            "unknown-model",
            "unknown model name",
            ("show", "resnet19"),
            "did you mean 'resnet18'",
            "use a name from `fusiontune models` or a path to an .onnx file",
        ),
        Case(
            "missing-file",
            "ONNX file does not exist",
            ("show", f"{TMP}/nothere.onnx"),
            "nothere.onnx: no such file",
            "check the path",
        ),
        Case(
            "truncated-onnx",
            "truncated ONNX file",
            ("show", f"{TMP}/cut.onnx"),
            "cut.onnx: is truncated or corrupt",
            "re-export or re-download the model",
            {"cut.onnx": valid[: len(valid) // 2]},
        ),
        Case(
            "not-onnx",
            "file is not ONNX",
            ("show", f"{TMP}/notes.onnx"),
            "notes.onnx: is not ONNX",
            "pass an ONNX model (protobuf), not another format",
            {"notes.onnx": "this is a text file, not a protobuf\n"},
        ),
        Case(
            "onnx-cycle",
            "ONNX graph with a cycle",
            ("show", f"{TMP}/cycle.onnx"),
            "cycle.onnx: the graph has a cycle",
            "fix the exporter; ONNX graphs must be acyclic",
            {"cycle.onnx": _onnx_bytes("cycle")},
        ),
        Case(
            "onnx-produced-twice",
            "ONNX tensor produced by two nodes",
            ("show", f"{TMP}/twice.onnx"),
            "tensor 't' is produced twice",
            "give each node output a unique name",
            {"twice.onnx": _onnx_bytes("twice")},
        ),
        Case(
            "dynamic-shape",
            "ONNX input with a dynamic dimension",
            ("show", f"{TMP}/dyn.onnx"),
            "is dynamic; give static shapes",
            "pass `--input-shape x=1,4` with every dimension fixed",
            {"dyn.onnx": _onnx_bytes("dynamic")},
        ),
        Case(
            "space-unknown-key",
            "unknown key in a search-space YAML",
            (*search, "--space", f"{TMP}/space.yaml", "mlp_relu"),
            "unknown key 'trails' (did you mean 'trials'?)",
            "spell the key as listed in the message",
            {"space.yaml": "trails: 10\n"},
        ),
        Case(
            "space-ill-typed",
            "search-space value of the wrong type",
            (*search, "--space", f"{TMP}/space.yaml", "mlp_relu"),
            "space.yaml: trials must be a positive integer",
            "give the type the message names",
            {"space.yaml": "trials: ten\n"},
        ),
        Case(
            "space-out-of-range",
            "search-space knob range the hardware refuses",
            (*search, "--space", f"{TMP}/space.yaml", "mlp_relu"),
            "space.yaml: knobs.adc_bits = 0: key 'adc_bits' = 0 is out of range",
            "keep knob ranges inside the allowed range the message gives",
            {"space.yaml": "knobs:\n  adc_bits: {low: 0, high: 8}\n"},
        ),
        Case(
            "space-knob-pair",
            "search-space knobs that combine into an invalid chip",
            (*search, "--space", f"{TMP}/space.yaml", "mlp_relu"),
            "space.yaml: knobs.dac_bits = 8 with knobs.act_bits = 4 makes an invalid chip",
            "narrow the two ranges so that every combination is valid (here dac_bits <= act_bits)",
            {
                "space.yaml": "knobs:\n  dac_bits: {choices: [1, 8]}\n"
                "  act_bits: {low: 4, high: 8}\n"
            },
        ),
        Case(
            "space-bad-yaml",
            "search space is not valid YAML",
            (*search, "--space", f"{TMP}/space.yaml", "mlp_relu"),
            "not valid YAML at line",
            "fix the YAML syntax at the line named",
            {"space.yaml": "trials: 10\nknobs: {adc_bits: [\n"},
        ),
        Case(
            "hw-zero-buffer",
            "hardware with a zero activation buffer",
            ("simulate", "mlp_relu", "--hw", f"{TMP}/hw.yaml"),
            "key 'buffer_bytes' = 0 is out of range",
            "give a positive buffer size in bytes",
            {"hw.yaml": "buffer_bytes: 0\n"},
        ),
        Case(
            "hw-adc-zero",
            "hardware with 0 ADC bits",
            ("simulate", "mlp_relu", "--hw", f"{TMP}/hw.yaml"),
            "key 'adc_bits' = 0 is out of range",
            "use at least 1 ADC bit (and one listed in adc_pj_by_bits)",
            {"hw.yaml": "adc_bits: 0\n"},
        ),
        Case(
            "hw-adc-no-energy",
            "ADC resolution with no energy in the table",
            ("simulate", "mlp_relu", "--hw", f"{TMP}/hw.yaml"),
            "has no energy in adc_pj_by_bits",
            "pick an ADC resolution listed, or add it to adc_pj_by_bits",
            {"hw.yaml": "adc_bits: 3\n"},
        ),
        Case(
            "plan-unknown-op",
            "plan JSON naming an op the model does not have",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "fc9",
            "use op names from `fusiontune show MODEL`",
            {
                "plan.json": _plan(
                    [(["fc1"], "single"), (["fc1.relu"], "single"), (["fc9"], "single")]
                )
            },
        ),
        Case(
            "plan-op-twice",
            "plan JSON with an op in two groups",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "op 'fc1.relu' is in two groups",
            "put every op in exactly one group",
            {"plan.json": _plan([(["fc1", "fc1.relu"], "fused"), (["fc1.relu"], "single"), *REST])},
        ),
        Case(
            "plan-missing-op",
            "plan JSON that leaves an op out",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "in no group: fc3",
            "put every op in exactly one group",
            {"plan.json": _plan([(["fc1"], "single"), (["fc1.relu"], "single"), *REST[:2]])},
        ),
        Case(
            "plan-illegal-group",
            "plan JSON with a group no legality rule allows",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "breaks rule 1 (convex)",
            "split the group as the named rule requires (`fusiontune plans MODEL --explain`)",
            {"plan.json": _plan([(["fc1", "fc2"], "fused"), (["fc1.relu"], "single"), *REST[1:]])},
        ),
        Case(
            "storage-unreachable",
            "study storage URL that cannot be opened",
            (*search, "--storage", f"sqlite:///{TMP}/no/such/dir/x.db", "mlp_relu"),
            "cannot be opened",
            "check the URL, that the database server is up and its driver installed",
        ),
        Case(
            "address-unreachable",
            "Ray cluster address nobody listens on",
            (
                "search",
                "mlp_relu",
                "--trials",
                "4",
                "--out",
                f"{TMP}/out",
                "--address",
                "127.0.0.1:1",
            ),
            "--address 127.0.0.1:1",
            "give the address `ray start --head` printed, or leave --address out",
        ),
        Case(
            "out-not-writable",
            "output folder that cannot be written",
            (*search[:-2], "--out", f"{TMP}/file.txt", "mlp_relu"),
            "cannot write results",
            "choose a writable folder with --out",
            {"file.txt": "a file where a folder should be\n"},
        ),
        Case(
            "export-plan-missing",
            "`export --plan` names a file that does not exist",
            ("export", "mlp_relu", "--plan", f"{TMP}/best_plan.json", "-o", f"{TMP}/m.onnx"),
            "best_plan.json': not a file",
            "pass the plan JSON a search wrote (`<out>/<study>/best_plan.json`), greedy or optimal",
        ),
        Case(
            "export-plan-other-model",
            "`export --plan` with a plan of another model",
            ("export", "mlp_wide", "--plan", f"{TMP}/plan.json", "-o", f"{TMP}/m.onnx"),
            "names op 'fc1.relu', which is not in graph 'mlp_wide'",
            "export the model the plan was searched for (same model, input size and batch)",
            {"plan.json": _plan([(["fc1"], "single"), (["fc1.relu"], "single"), *REST])},
        ),
        Case(
            "export-schedule-as-plan",
            "`export --plan` given a schedule instead of a plan",
            ("export", "mlp_relu", "--plan", f"{TMP}/s.json", "-o", f"{TMP}/m.onnx"),
            "is a schedule written by `fusiontune export --format schedule`",
            "pass a plan JSON such as best_plan.json",
            {"s.json": json.dumps({"format": "fusiontune-schedule", "groups": []})},
        ),
        Case(
            "export-unwritable",
            "`export -o` into a folder that does not exist",
            ("export", "mlp_relu", "-o", f"{TMP}/no/such/dir/m.onnx"),
            "cannot write",
            "create the folder first or choose a writable path",
        ),
        # ---- values on the command line
        Case(
            "workers-too-many",
            "more workers than the machine can use",
            (search[0], "--workers", "1000", *search[3:], "mlp_relu"),
            "argument --workers: 1000 is out of range; allowed 1 ..",
            "use at most 4 workers per CPU core (`nproc`), or --address for a cluster",
        ),
        Case(
            "workers-zero",
            "zero workers",
            (search[0], "--workers", "0", *search[3:], "mlp_relu"),
            "argument --workers: 0 is out of range",
            "give at least 1 worker (1 = serial, in-process)",
        ),
        Case(
            "seed-negative",
            "a negative seed",
            (*search, "--seed", "-1", "mlp_relu"),
            "argument --seed: -1 is out of range; allowed 0 .. 4294967295",
            "use a seed between 0 and 2^32 - 1",
        ),
        Case(
            "seed-huge",
            "a seed beyond 32 bits",
            (*search, "--seed", str(2**70), "mlp_relu"),
            f"argument --seed: {2**70} is out of range",
            "use a seed between 0 and 2^32 - 1",
        ),
        Case(
            "trials-zero",
            "a budget of zero trials",
            (*search[:3], *search[5:], "--trials", "0", "mlp_relu"),
            "argument --trials: 0 is out of range; allowed 1 .. 2^63 - 1",
            "give at least one trial",
        ),
        Case(
            "study-parent-path",
            "study name that climbs out of --out",
            (*search, "--study", "../../x", "mlp_relu"),
            "study name '../../x' is not allowed",
            "name the study with letters, digits and _ . + -; choose the folder with --out",
        ),
        Case(
            "study-absolute",
            "absolute path as a study name",
            (*search, "--study", "/tmp/x", "mlp_relu"),
            "study name '/tmp/x' is not allowed",
            "name the study with letters, digits and _ . + -; choose the folder with --out",
        ),
        Case(
            "study-newline",
            "study name with a newline",
            (*search, "--study", "a\nb", "mlp_relu"),
            "study name 'a\\nb' is not allowed",
            "name the study with letters, digits and _ . + -",
        ),
        Case(
            "resume-missing",
            "--resume of a study that does not exist",
            (*search, "--resume", "--study", "nothere", "mlp_relu"),
            "study 'nothere' does not exist in",
            "leave out --resume to start the study, or check --study, --out and --storage",
        ),
        Case(
            "input-shape-overflow",
            "--input-shape whose size overflows int64",
            ("show", f"{TMP}/dyn.onnx", "--input-shape", "x=99999999999,99999999999"),
            "elements overflow int64",
            "give the input shape the model was exported for",
            {"dyn.onnx": _onnx_bytes("dynamic")},
        ),
        Case(
            "zoo-input-size-too-large",
            "input size whose zoo model weights exceed the memory limit",
            ("simulate", "vgg16", "--input-size", "20000"),
            "--input-size 20000 is too large for zoo model 'vgg16'",
            "use at most the largest --input-size the message gives, or raise --memory-limit",
        ),
        Case(
            "memory-limit-bad",
            "memory limit that is not a size",
            ("show", "mlp_relu", "--memory-limit", "lots"),
            "argument --memory-limit: 'lots' is not a size",
            "give bytes, e.g. 4294967296, 4GiB or 500MB",
        ),
        # ---- inputs that would exhaust the machine
        Case(
            "input-size-verify",
            "input size whose execution needs more than the memory limit",
            ("simulate", "resnet18", "--input-size", "1000", "--verify", "--memory-limit", "256MB"),
            "verifying it (the reference run and the execution) needs 684 MiB of tensors, more "
            "than the memory limit of 244 MiB (largest: 'stem.relu', 1x64x500x500",
            "simulate without --verify (analytic, no tensors), a smaller --input-size, or raise "
            "--memory-limit if the machine has the memory",
        ),
        Case(
            "onnx-huge-weight",
            "ONNX weight declared with 10^9 channels",
            ("show", f"{TMP}/wide.onnx"),
            "tensor 'w' (1000000000x4x1x1, 4 B per element) needs 14.9 GiB, more than the "
            "memory limit",
            "check the export; raise --memory-limit only if the machine has the memory",
            {"wide.onnx": _onnx_bytes("huge-weight")},
        ),
        Case(
            "onnx-wide-input-verify",
            "ONNX input of 10^9 floats under --verify",
            ("simulate", f"{TMP}/wide.onnx", "--verify"),
            "needs 7.45 GiB of tensors, more than the memory limit",
            "simulate without --verify, or raise --memory-limit if the machine has the memory",
            {"wide.onnx": _onnx_bytes("wide-input")},
        ),
        Case(
            "onnx-string-input",
            "ONNX input of strings",
            ("show", f"{TMP}/text.onnx"),
            "input 'x' has dtype string; fusiontune models numeric inputs",
            "export the model from its numeric input (token ids, not text)",
            {"text.onnx": _onnx_bytes("string-input")},
        ),
        Case(
            "onnx-negative-dim",
            "ONNX input with a negative dimension",
            ("show", f"{TMP}/neg.onnx"),
            "input 'x' dimension 1 is -3; dimensions must be >= 1",
            "fix the export, or give the shape with --input-shape",
            {"neg.onnx": _onnx_bytes("negative-dim")},
        ),
        Case(
            "onnx-zero-size-weight",
            "ONNX initializer with a dimension of 0",
            ("show", f"{TMP}/empty.onnx"),
            "initializer 'w' (0x4) has dimension 0 = 0, read by op 'fc' (MatMul)",
            "fix the export: weights, biases and scales must not be empty",
            {"empty.onnx": _onnx_bytes("zero-weight")},
        ),
        Case(
            "yaml-alias-bomb",
            "search space YAML whose aliases expand to billions of nodes (under unknown keys)",
            (*search, "--space", f"{TMP}/space.yaml", "mlp_relu"),
            "space.yaml: unknown key 'a'; allowed: hardware, objective, sampler, trials",
            "spell the keys as listed and write the values out; a search space needs no aliases",
            {"space.yaml": ALIAS_BOMB},
        ),
        Case(
            "hw-yaml-alias-bomb",
            "hardware YAML whose aliases expand to billions of nodes (under unknown keys)",
            ("simulate", "mlp_relu", "--hw", f"{TMP}/hw.yaml"),
            "(and its aliases expand to more than 100,000 nodes: write the values out)",
            "spell the keys as listed and write the values out; a hardware file needs no aliases",
            {"hw.yaml": ALIAS_BOMB},
        ),
        Case(
            "yaml-too-deep",
            "search space YAML nested thousands of levels deep",
            (*search, "--space", f"{TMP}/space.yaml", "mlp_relu"),
            "space.yaml: nested deeper than 64 levels",
            "a search space has three levels: keys, knobs, their settings",
            {"space.yaml": "knobs: " + "[" * 5000 + "]" * 5000 + "\n"},
        ),
        Case(
            "yaml-not-utf8",
            "search space saved in Latin-1",
            (*search, "--space", f"{TMP}/space.yaml", "mlp_relu"),
            "space.yaml: not UTF-8 text (byte 0xe9 at offset 16)",
            "save the file as UTF-8",
            {"space.yaml": "trials: 10 # caf\xe9\n".encode("latin-1")},
        ),
        Case(
            "hw-adc-nan",
            "hardware ADC energy of NaN",
            ("simulate", "mlp_relu", "--hw", f"{TMP}/hw.yaml"),
            "adc_pj_by_bits' entry 8: nan is out of range",
            "give every ADC resolution a finite energy in pJ",
            {"hw.yaml": "adc_pj_by_bits: {8: .nan}\n"},
        ),
        Case(
            "plan-json-too-deep",
            "plan JSON nested thousands of levels deep",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "plan.json: nested deeper than 64 levels",
            "write the plan as `fusiontune plans MODEL --out` does",
            {"plan.json": "[" * 100000 + "]" * 100000},
        ),
        Case(
            "plan-json-not-utf8",
            "plan JSON that is not UTF-8",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "plan.json: not UTF-8 text (byte 0xff at offset 0)",
            "save the plan as UTF-8 JSON",
            {"plan.json": b"\xff\xfe{}"},
        ),
        Case(
            "plan-op-list",
            "plan JSON with a list where an op name belongs",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "groups[0].ops[0] must be an op name (a string), got ['fc1']",
            "list op names as strings",
            {"plan.json": json.dumps({"groups": [{"ops": [["fc1"]], "mode": "single"}]})},
        ),
        Case(
            "plan-mode-list",
            "plan JSON with a list where a mode belongs",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "groups[0].mode must be one of single, fused, merge, stream, got ['single']",
            "give each group one mode",
            {"plan.json": json.dumps({"groups": [{"ops": ["fc1"], "mode": ["single"]}]})},
        ),
        Case(
            "plan-key-typo",
            "plan JSON with a misspelt key",
            ("simulate", "mlp_relu", "--plan", f"{TMP}/plan.json"),
            "groups[0]: unknown key 'mdoe' (did you mean 'mode'?)",
            "spell the key as listed in the message",
            {"plan.json": json.dumps({"groups": [{"ops": ["fc1"], "mdoe": "single"}]})},
        ),
        Case(
            "onnx-attribute-type",
            "ONNX attribute of the wrong type",
            ("show", f"{TMP}/attr.onnx"),
            "attr.onnx: op 'softmax' (Softmax): attribute 'axis' must be INT, got FLOAT",
            "fix the export: give the attribute the type the ONNX operator declares",
            {"attr.onnx": _onnx_bytes("attribute-type")},
        ),
        Case(
            "onnx-mixed-types",
            "ONNX op whose inputs must share a type but do not",
            ("show", f"{TMP}/int.onnx"),
            "int.onnx: op 'fc' (MatMul): inputs 'x' (float32) and 'w' (int64) must have the same",
            "fix the export (a Cast, or a weight of the input's type)",
            {"int.onnx": _onnx_bytes("int-weight")},
        ),
        Case(
            "yaml-key-twice",
            "hardware YAML giving one key twice",
            ("simulate", "mlp_relu", "--hw", f"{TMP}/hw.yaml"),
            "hw.yaml: key 'buffer_bytes' is given twice (lines 1 and 3); keep one",
            "keep one of the two lines (YAML would silently take the last)",
            {"hw.yaml": "buffer_bytes: 65536\nadc_bits: 8\nbuffer_bytes: 131072\n"},
        ),
        Case(
            "input-size-onnx",
            "--input-size given for an ONNX file",
            ("show", f"{TMP}/m.onnx", "--input-size", "64"),
            "m.onnx: --input-size and --batch apply to zoo models only; an ONNX file takes "
            "--input-shape",
            "give `--input-shape NAME=D,D,...` for the file's dynamic dimensions",
            {"m.onnx": valid},
        ),
        Case(
            "no-command",
            "no command",
            (),
            "give a command: models, show, plans, simulate, search, export, report",
            "`fusiontune --help` lists the commands",
        ),
    ]


CASES: list[Case] = _cases()


def materialise(case: Case, tmp: Path) -> list[str]:
    """Create the case's files under ``tmp``; return its argv with ``{tmp}`` filled in."""
    for name, content in case.files.items():
        path = tmp / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return [a.replace(TMP, str(tmp)) for a in case.argv]


@pytest.fixture(autouse=True)
def _keep_memory_limit() -> Iterator[None]:
    """``--memory-limit`` sets a process-wide limit: restore it after each case."""
    from fusiontune.limits import memory_limit, set_memory_limit

    previous = memory_limit()
    yield
    set_memory_limit(previous)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gives_one_clear_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = materialise(case, tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == case.code, err
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("fusiontune: error: ")
    assert case.expect in lines[0], lines[0]


def test_unexpected_error_is_one_line_with_a_debug_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug (not a user error) prints one line and the debug hint; the traceback only with
    FUSIONTUNE_DEBUG=1."""
    import fusiontune.cli.models as models

    def broken(args: object) -> int:
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(models, "run", broken)
    monkeypatch.delenv("FUSIONTUNE_DEBUG", raising=False)
    assert main(["models"]) == EXIT_UNEXPECTED
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "ZeroDivisionError: simulated bug" in err and "FUSIONTUNE_DEBUG=1" in err
    assert len(err.strip().splitlines()) == 2  # the error, then the hint
    monkeypatch.setenv("FUSIONTUNE_DEBUG", "1")
    assert main(["models"]) == EXIT_UNEXPECTED
    assert "Traceback" in capsys.readouterr().err


def test_dynamic_onnx_searches_with_the_suggested_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dynamic-shape message says ``--input-shape x=1,4``; ``search`` takes it."""
    model = tmp_path / "dyn.onnx"
    model.write_bytes(_onnx_bytes("dynamic"))
    argv = ["search", str(model), "--workers", "1", "--trials", "3", "--out", str(tmp_path)]
    assert main(argv) == EXIT_USER_ERROR
    assert "--input-shape x=1,4" in capsys.readouterr().err
    assert main([*argv, "--input-shape", "x=1,4"]) == 0
    assert "study dyn: 3 trials" in capsys.readouterr().out
