"""`longca new-plugin NAME --kind KIND` for every plugin kind: the copy carries the new name only, and
(slow) installs and passes its own tests as generated, with nothing edited.

Each generated plugin is pip-installed into a temporary folder that only the subprocesses see
(`tests/test_plugin_kit.py`'s helpers), so the environment is left as it was found.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from longca.errors import LongcaError
from longca_cli.main import app
from longca_cli.newplugin import KINDS, TEMPLATES, check_name, create_plugin, template_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plugin_kit import env_with, longca, pip_install_target  # noqa: E402

NEW = {"kernel": "scaf_kernel", "mask": "scaf_mask", "sampler": "scaf_sampler", "strategy": "scaf_cp"}
LISTING = {"kernel": "list-kernels", "mask": "list-masks", "sampler": "list-samplers", "strategy": "list-cp"}


def test_every_kind_has_a_template():
    assert sorted(p.name for p in TEMPLATES.iterdir() if (p / "pyproject.toml").is_file()) == sorted(KINDS)
    assert set(NEW) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generated_files_carry_the_new_name_only(kind, tmp_path):
    old = template_name(TEMPLATES / kind)
    target = create_plugin(NEW[kind], tmp_path / kind, kind=kind)
    package = target / f"longca_plugin_{NEW[kind]}"
    assert (package / "hooks.py").is_file() and (package / KINDS[kind].edit).is_file()
    assert (target / "tests" / f"test_{NEW[kind]}.py").is_file()
    text = "\n".join(p.read_text() for p in target.rglob("*") if p.is_file())
    assert old not in text and old.replace("_", "-") not in text
    dist = f"longca-plugin-{NEW[kind].replace('_', '-')}"
    assert f'name = "{dist}"' in text and f'{NEW[kind]} = "longca_plugin_{NEW[kind]}.hooks"' in text


@pytest.mark.parametrize("kind,taken", [("mask", "causal"), ("sampler", "uniform")])
def test_a_name_taken_in_its_kind_is_refused(kind, taken, tmp_path):
    done = CliRunner().invoke(app, ["new-plugin", taken, "--kind", kind, "--output", str(tmp_path / "x")])
    assert done.exit_code == 2 and f"a {kind} named {taken!r} is already registered by longca-core" in done.output
    assert not (tmp_path / "x").exists()
    with pytest.raises(LongcaError, match="a CP strategy named 'my_ring' is already registered by longca-plugin-x"):
        check_name("my_ring", {"my_ring": "longca-plugin-x"}, "strategy")


def test_unknown_kind_is_one_line():
    done = CliRunner().invoke(app, ["new-plugin", "zz", "--kind", "attention"])
    want = "unknown plugin kind 'attention': one of kernel, mask, sampler, strategy"
    assert done.exit_code == 2 and want in done.output
    assert "Traceback" not in done.output


def test_new_plugin_prints_the_next_steps_of_its_kind(tmp_path):
    done = CliRunner().invoke(app, ["new-plugin", "zz_cp", "--kind", "strategy", "--output", str(tmp_path / "s")])
    assert done.exit_code == 0, done.output
    assert "longca dist-run --strategy zz_cp --inner reference" in done.output
    assert str(tmp_path / "s" / "longca_plugin_zz_cp" / "algorithm.py") in done.output


@pytest.fixture(scope="module")
def scaffolds(tmp_path_factory) -> dict[str, Path]:
    """Every kind generated under its new name and pip-installed into one site folder."""
    base = tmp_path_factory.mktemp("scaffolds")
    made = {kind: create_plugin(NEW[kind], base / kind, kind=kind) for kind in KINDS}
    pip_install_target(list(made.values()), base / "site")
    return {"site": base / "site", **made}


@pytest.mark.slow  # pip-installs the four plugins; the strategy's suite spawns gloo ranks
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generated_plugin_installs_and_passes_its_own_tests(kind, scaffolds):
    listed = longca(scaffolds["site"], LISTING[kind], "-f", "json").stdout
    assert f'"{NEW[kind]}"' in listed, listed[-2000:]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=scaffolds[kind], env=env_with(scaffolds["site"]), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
