"""Regression tests for issue 24, the families left after tests/test_hardening3.py: alias bombs
naming the key at fault, a corrupt ``trials.parquet``, double Ctrl-C, two drivers starting one
study, a full disk and a torn journal."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from fusiontune.cli.main import main


# ---- YAML alias bombs whose content is wrong -------------------------------------------------
def _bomb_list(levels: int = 9) -> str:
    """A block list whose items are anchored lists of ten aliases of the item before: 10^levels
    nodes once expanded, in a few hundred bytes."""
    names = "abcdefghijklmnop"[:levels]
    lines = ["\n  - &a [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"\n  - &{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in itertools.pairwise(names)]
    return "".join(lines) + "\n"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("trails:" + _bomb_list(), "space.yaml: unknown key 'trails' (did you mean 'trials'?)"),
        ("trials:" + _bomb_list(), "space.yaml: trials must be a positive integer, got [["),
        (
            "knobs:\n  adc_bits:\n    choices:" + _bomb_list().replace("\n  ", "\n      "),
            "space.yaml: knobs.adc_bits.choices may hold only numbers, strings or booleans",
        ),
    ],
    ids=["unknown-key", "bad-value", "bad-knob-choices"],
)
def test_space_alias_bomb_names_the_key_at_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expect: str
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(text)
    out = tmp_path / "out"
    argv = ["search", "--workers", "1", "--trials", "2", "--out", str(out), "--space", str(space)]
    err = _run([*argv, "mlp_relu"], capsys)
    assert expect in err
    assert "expand to more than 100,000 nodes" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("buffer_bytse:" + _bomb_list(), "hw.yaml: unknown key 'buffer_bytse' (did you mean"),
        ("buffer_bytes:" + _bomb_list(), "hw.yaml: key 'buffer_bytes' must be"),
    ],
    ids=["unknown-key", "bad-value"],
)
def test_hardware_alias_bomb_names_the_key_at_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expect: str
) -> None:
    hw = tmp_path / "hw.yaml"
    hw.write_text(text)
    err = _run(["simulate", "mlp_relu", "--hw", str(hw)], capsys)
    assert expect in err
    assert "expand to more than 100,000 nodes" in err


def test_alias_bomb_message_is_bounded_and_quick(tmp_path: Path) -> None:
    """The bounded copy validated in place of the expansion keeps the message short."""
    from fusiontune.errors import ConfigError
    from fusiontune.search.space import load_space

    space = tmp_path / "space.yaml"
    space.write_text("trials:" + _bomb_list(12))  # 10^12 nodes expanded
    with pytest.raises(ConfigError) as info:
        load_space(space)
    assert "trials must be a positive integer" in str(info.value)
    assert len(str(info.value)) < 2_000


def test_alias_bomb_with_no_fault_in_its_bounded_copy_keeps_the_expansion_message() -> None:
    from fusiontune.errors import ConfigError
    from fusiontune.fileio import parse_yaml

    with pytest.raises(ConfigError, match=r"^s\.yaml: expands to more than 100,000 nodes"):
        parse_yaml("k:" + _bomb_list(), "s.yaml", ConfigError, check=lambda data: None)
