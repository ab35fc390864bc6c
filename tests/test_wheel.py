"""The wheel ships everything the package reads: built, installed outside the checkout, run there.

The wheel is built from a copy of the sources (no stale ``build/`` of the checkout can leak into
it) without build isolation and installed with ``--no-index``, so nothing is downloaded. The new
venv borrows the installed dependencies of the interpreter running the tests through a ``.pth``
file; the venv's own site-packages comes first on ``sys.path``, so ``fusiontune`` is the wheel's.
About 5 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("fusiontune", "pyproject.toml", "README.md")
"""What setuptools reads to build the wheel (the package, its metadata, the long description)."""
TIMEOUT_S = 300


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )


def _clean_env() -> dict[str, str]:
    """The environment without anything that points Python at the checkout."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONUSERBASE")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PIP_")}


class Installed:
    """A fresh venv outside the checkout with the wheel installed, and a scratch cwd."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.bin = self.venv / ("Scripts" if os.name == "nt" else "bin")
        self.python = self.bin / "python"
        self.cwd = root / "work"
        self.env = _clean_env()
        self.env["PATH"] = f"{self.bin}{os.pathsep}{self.env.get('PATH', '')}"

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return _run(list(argv), self.cwd, self.env)

    def fusiontune(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """The console script the wheel installed."""
        return self.run(str(self.bin / "fusiontune"), *argv)


def _built_wheel(root: Path) -> Path:
    src, dist = root / "src", root / "dist"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(REPO / name, src / name, ignore=ignore)
        else:
            shutil.copy2(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), "."],
        src,
        _clean_env(),
    )
    assert built.returncode == 0, (
        "building the wheel needs setuptools and wheel in the test venv (the [test] extra):\n"
        + built.stdout[-2000:]
        + built.stderr[-2000:]
    )
    (wheel,) = dist.glob("fusiontune-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    assert not root.resolve().is_relative_to(REPO)
    wheel = _built_wheel(root)
    box = Installed(root)
    box.cwd.mkdir()
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(box.venv)], root, _clean_env())
    assert made.returncode == 0, made.stderr
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = box.run(str(box.python), "-c", where)
    assert purelib.returncode == 0, purelib.stderr
    site_packages = Path(purelib.stdout.strip())
    deps = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    assert deps, sys.path
    (site_packages / "_outer_dependencies.pth").write_text("\n".join(deps) + "\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(box.python)]
    done = box.run(*pip, "install", "--no-deps", "--no-index", str(wheel))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return box


def test_the_installed_package_is_the_wheels_and_ships_its_data(installed: Installed) -> None:
    code = (
        "import fusiontune, fusiontune.presets as p;"
        "from fusiontune.sim.hardware import preset_names;"
        "print(fusiontune.__file__); print(','.join(preset_names()));"
        "print(p.default_space_yaml().splitlines()[0])"
    )
    done = installed.run(str(installed.python), "-c", code)
    assert done.returncode == 0, done.stderr
    where, names, first = done.stdout.splitlines()
    assert Path(where).resolve().is_relative_to(installed.venv.resolve()), where
    assert not Path(where).resolve().is_relative_to(REPO)
    shipped = sorted(p.stem for p in (REPO / "fusiontune/presets/hardware").glob("*.yaml"))
    assert names.split(",") == shipped
    assert first.startswith("# fusiontune default search space")


def test_simulate_with_a_preset_runs_from_the_wheel(installed: Installed) -> None:
    done = installed.fusiontune("simulate", "resnet18", "--hw", "sram_edge")
    assert done.returncode == 0, done.stderr
    assert "hardware sram_edge" in done.stdout and "Traceback" not in done.stderr
    env = {**_clean_env(), "PYTHONPATH": str(REPO)}
    argv = ["-m", "fusiontune.cli.main", "simulate", "resnet18", "--hw", "sram_edge"]
    checkout = _run([sys.executable, *argv], REPO, env)
    assert checkout.returncode == 0, checkout.stderr
    assert done.stdout == checkout.stdout  # same numbers as the checkout gives
    typo = installed.fusiontune("simulate", "resnet18", "--hw", "sram_edg")
    assert typo.returncode != 0 and "Traceback" not in typo.stderr
    assert "did you mean 'sram_edge'" in typo.stderr


def test_a_four_trial_search_runs_from_the_wheel(installed: Installed) -> None:
    out = installed.cwd / "results"
    argv = ["search", "resnet18", "--trials", "4", "--workers", "1", "--backend", "serial"]
    done = installed.fusiontune(*argv, "--out", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    summary = json.loads((out / "resnet18" / "summary.json").read_text())
    assert summary["n_trials"] == 4 and summary["sampler"] == "local"  # the packaged default
    assert summary["best"]["feasible"] and summary["best"]["traffic_bytes"] > 0
    for name in ("trials.parquet", "groups.parquet", "best_plan.json"):
        assert (out / "resnet18" / name).is_file(), name
