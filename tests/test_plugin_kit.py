"""The plugin kit end to end: the template and `longca new-plugin` give a plugin that installs, is
listed and runs; deliberately broken plugins are reported by `longca plugins` and by the
conformance suite without breaking the other plugins.

Plugins are installed with `pip install --target` into a temporary folder that only the
subprocesses see (PYTHONPATH), so the test leaves the environment as it found it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from longca import hookimpl
from longca.plugins import PluginInfo, PluginManager, Registry, _register, get_registry

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "longca_cli" / "longca_cli" / "plugin_templates" / "kernel"
BROKEN = ROOT / "tests" / "fixtures" / "broken_plugins"
NEW_NAME = "kit_demo"


def pip_install_target(sources: list[Path], target: Path) -> None:
    """Build and install distributions into `target` without touching the environment."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
           "--target", str(target)]
    if importlib.util.find_spec("setuptools") is not None:
        cmd.append("--no-build-isolation")  # no network needed; else pip fetches setuptools
    subprocess.run(cmd + [str(s) for s in sources], check=True, capture_output=True, text=True)


def env_with(site: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")  # tiny problems: one thread is faster, and immune to a busy machine
    env.pop("LONGCA_PLUGINS", None)
    env.pop("LONGCA_DISABLE_PLUGINS", None)
    return env


def longca(site: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "longca_cli.main", *args], env=env_with(site),
                          capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"longca {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


CLI_DRIVER = """
import json, sys
from typer.testing import CliRunner
from longca_cli.main import app
out = [CliRunner().invoke(app, args) for args in json.loads(sys.argv[1])]
print("RESULT " + json.dumps([{"exit_code": r.exit_code, "output": r.output} for r in out]))
"""


def longca_many(site: Path, *commands: list[str]) -> list[str]:
    """Several `longca` commands in one interpreter (torch imported once); their outputs, each exit 0."""
    proc = subprocess.run([sys.executable, "-c", CLI_DRIVER, json.dumps(list(commands))], env=env_with(site),
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(lines[-1][len("RESULT "):])
    for args, result in zip(commands, results, strict=False):
        assert result["exit_code"] == 0, f"longca {' '.join(args)}: {result['output'][-2000:]}"
    return [result["output"] for result in results]


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> dict[str, Path]:
    """A site folder with the template as it stands, a plugin made by `new-plugin`, and the broken ones."""
    from longca_cli.newplugin import create_plugin

    base = tmp_path_factory.mktemp("kit")
    template = base / "template"
    shutil.copytree(TEMPLATE, template, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    generated = create_plugin(NEW_NAME, base / "generated", template)
    broken = base / "broken"
    shutil.copytree(BROKEN, broken, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    site = base / "site"
    pip_install_target([template, generated, *sorted(p for p in broken.iterdir() if p.is_dir())], site)
    return {"site": site, "template": template, "generated": generated, "base": base}


@pytest.mark.slow  # the kit fixture pip-installs the plugins
def test_new_plugin_is_listed_and_runs_with_check(kit):
    kernels = {row["name"]: row for row in json.loads(longca(kit["site"], "list-kernels", "-f", "json").stdout)}
    row = kernels[NEW_NAME]
    assert row["available"] and row["distribution"] == "longca-plugin-kit-demo", row
    assert row["lse_primitives"] and "causal_document" in row["masks"]
    assert kernels["mykernel"]["available"] and "Bad Name" not in kernels
    out = longca(kit["site"], "run", "--kernel", NEW_NAME, "--mask", "causal_document", "--seqlen", "512",
                 "--heads", "4:2", "--head-dim", "32", "--dtype", "float32", "--device", "cpu",
                 "--direction", "fwdbwd", "--check", "--warmup", "0", "--repeat", "1", "--samples", "1",
                 "-f", "json").stdout
    result = json.loads(out)  # fwdbwd with --check compares the output and dq, dk, dv
    assert result["status"] == "ok" and result["rel_err"] < 1e-4, result
    assert set(result["rel_err_detail"]) == {"out", "dq", "dk", "dv"}


@pytest.mark.slow  # the kit fixture pip-installs the plugins
@pytest.mark.parametrize("nproc", ["2", "4"])
def test_new_plugin_is_a_correct_inner_kernel_of_every_cp_strategy(kit, nproc):
    """The generated plugin, unchanged, under ring-p2p, usp and loongtrain with --check (gloo):
    CP strategies call backward_lse with the out and lse merged over every key piece."""
    out = longca(kit["site"], "dist-run", "--strategy", "ring-p2p,usp,loongtrain", "--inner", NEW_NAME,
                 "--nproc", nproc, "--device", "cpu", "--mask", "causal_document", "--seqlen", "512",
                 "--heads", "4:4", "--head-dim", "16", "--dtype", "float32", "--direction", "fwdbwd", "--check",
                 "--warmup", "0", "--repeat", "1", "--samples", "1", "-f", "json").stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(r["strategy"] for r in rows) == ["loongtrain", "ring-p2p", "usp"], out
    for row in rows:
        assert row["status"] == "ok" and row["rel_err"] < 1e-4, row
        assert set(row["rel_err_detail"]) == {"out", "dq", "dk", "dv"}, row


@pytest.mark.slow  # the kit fixture pip-installs the plugins
def test_new_plugin_files_carry_the_new_name(kit):
    generated = kit["generated"]
    assert (generated / "longca_plugin_kit_demo" / "hooks.py").is_file()
    assert (generated / "tests" / "test_kit_demo.py").is_file()
    text = "\n".join(p.read_text() for p in generated.rglob("*") if p.is_file())
    assert "mykernel" not in text
    assert 'name = "longca-plugin-kit-demo"' in text and 'kit_demo = "longca_plugin_kit_demo.hooks"' in text


@pytest.mark.slow  # the kit fixture pip-installs the plugins
def test_template_passes_its_own_tests(kit):
    """The template as it stands: installed, its tests (the conformance suite) pass."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=kit["template"], env=env_with(kit["site"]), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


@pytest.mark.slow  # the kit fixture pip-installs the plugins
def test_broken_plugins_are_reported_and_break_nothing(kit):
    plugins = {p["name"]: p for p in json.loads(longca(kit["site"], "plugins", "-f", "json").stdout)}
    assert any("cannot import longca_plugin_brokenimport.hooks" in e and "longca_no_such_kernel_library" in e
               for e in plugins["brokenimport"]["errors"]), plugins["brokenimport"]
    assert any("invalid kernel name 'Bad Name'" in e for e in plugins["badname"]["errors"]), plugins["badname"]
    assert plugins["badname"]["distribution"] == "longca-plugin-badname"
    healthy = ["reference", "torch", "sdpa", "wrongcausal", "mykernel", NEW_NAME]
    for name in healthy:
        assert not plugins[name]["errors"], plugins[name]
    table = longca(kit["site"], "plugins").stdout
    assert "error: plugin brokenimport (longca-plugin-brokenimport): cannot import" in table
    assert "error: plugin badname (longca-plugin-badname): invalid kernel name 'Bad Name'" in table


BROKEN_TESTS = '''
import pytest
from longca_testing import conformance_tests

test_wrongcausal = conformance_tests("wrongcausal", devices=("cpu",))
test_badname = conformance_tests("Bad Name", devices=("cpu",))
test_brokenimport = conformance_tests("brokenimport", devices=("cpu",))


def test_fixture_raises_naming_the_mask(longca_conformance):
    with pytest.raises(AssertionError, match="mask causal fwd on cpu"):
        longca_conformance("wrongcausal", "cpu")
'''


@pytest.mark.slow  # the kit fixture pip-installs the plugins
def test_conformance_suite_fails_broken_plugins_clearly(kit):
    folder = kit["base"] / "broken_tests"
    folder.mkdir()
    (folder / "test_broken.py").write_text(BROKEN_TESTS)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "--tb=short",
                           "test_broken.py"], cwd=folder, env=env_with(kit["site"]),
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:]
    failed = sorted(line.split()[1].split("::")[1] for line in out.splitlines() if line.startswith("FAILED "))
    shapes = [f"test_wrongcausal[shape-{v}-{d}-cpu]" for v in ("s1152", "s515-mha", "s997-b2-gqa3")
              for d in ("bwd", "fwd")]
    assert failed == ["test_badname[registered]", "test_brokenimport[registered]",
                      "test_wrongcausal[mask-causal-bwd-cpu]", "test_wrongcausal[mask-causal-fwd-cpu]",
                      *shapes, "test_wrongcausal[timing-integrity-cpu]"], out[-4000:]
    assert "PASSED test_broken.py::test_wrongcausal[mask-full-fwd-cpu]" in out
    assert "PASSED test_broken.py::test_fixture_raises_naming_the_mask" in out
    assert "wrongcausal: mask causal fwd on cpu" in out and "incorrect: relative error" in out
    assert "unknown kernel 'Bad Name'" in out and "invalid kernel name 'Bad Name'" in out
    assert "cannot import longca_plugin_brokenimport.hooks" in out


def test_misspelled_hook_is_a_load_error():
    module = types.ModuleType("longca_plugin_typo")

    @hookimpl
    def longca_kernel():  # the hook is longca_kernels
        return []

    module.longca_kernel = longca_kernel
    info = PluginInfo("typo", "longca-plugin-typo", "0", "longca_plugin_typo")
    _register(Registry(), PluginManager(), info, module)
    assert info.errors and "unknown hook 'longca_kernel'" in info.errors[0]  # pluggy's own check
    assert "known hooks: longca_cp_strategies, longca_env_info, longca_kernels" in info.errors[0]
    # a hookimpl imported under another name (reusing another plugin's) is not a misspelling
    reuse = types.ModuleType("longca_plugin_reuse")
    reuse.theirs = longca_kernel
    reuse.longca_kernels = hookimpl(lambda: [])
    reuse.longca_kernels.__name__ = "longca_kernels"
    info = PluginInfo("reuse", "longca-plugin-reuse", "0", "longca_plugin_reuse")
    _register(Registry(), PluginManager(), info, reuse)
    assert not info.errors and info.hooks == ["longca_kernels"], info.errors


def test_new_plugin_command(tmp_path):
    from typer.testing import CliRunner

    from longca_cli.main import app

    runner = CliRunner()
    bad = runner.invoke(app, ["new-plugin", "Bad-Name", "--output", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "invalid plugin name 'Bad-Name'" in bad.output
    taken = runner.invoke(app, ["new-plugin", "reference", "--output", str(tmp_path / "y")])
    assert taken.exit_code == 2 and "already registered by longca-core" in taken.output
    ok = runner.invoke(app, ["new-plugin", "fresh_one", "--output", str(tmp_path / "z")])
    assert ok.exit_code == 0 and "pip install -e" in ok.output, ok.output
    assert (tmp_path / "z" / "longca_plugin_fresh_one" / "kernel.py").is_file()
    again = runner.invoke(app, ["new-plugin", "fresh_one", "--output", str(tmp_path / "z")])
    assert again.exit_code == 2 and "exists and is not empty" in again.output
    missing = runner.invoke(app, ["new-plugin", "other", "--output", str(tmp_path / "w"),
                                  "--template", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "plugin template not found" in missing.output


def test_template_compare_spec_is_a_valid_sweep_over_all_masks():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    from longca_runner.sweep import SpecFile

    spec = SpecFile.model_validate(tomllib.loads((TEMPLATE / "compare.toml").read_text())).sweep
    masks = spec.mask_names()  # "all": the 14 and topk_sparse, and any installed mask plugin's
    assert spec.kernels == ["mykernel", "fa4", "flex", "cudnn"] and masks == get_registry().mask_group("all")
    assert len([m for m in masks if get_registry().entry("masks", m).plugin.builtin]) == 15


OTHER_PROJECT_TESTS = '''
import pytest


@pytest.mark.gpu
def test_their_own_gpu_marker_is_theirs():
    pass


@pytest.mark.longca_gpu
def test_longca_gpu_needs_cuda():
    import torch

    assert torch.cuda.is_available()
'''


def test_pytest_plugin_leaves_other_projects_gpu_marker_alone(tmp_path):
    """Installed longca-core must not skip another project's `gpu` tests; it skips only `longca_gpu` ones."""
    import torch

    (tmp_path / "test_other.py").write_text(OTHER_PROJECT_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = gpu: their own marker\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "test_other.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "PASSED test_other.py::test_their_own_gpu_marker_is_theirs" in proc.stdout, proc.stdout
    if not torch.cuda.is_available():
        assert "SKIPPED" in proc.stdout and "needs a CUDA GPU" in proc.stdout, proc.stdout


SWEEP = """[sweep]
kernels = ["wrongcausal", "reference"]
masks = ["full", "causal"]
seqlens = [512]
heads = ["4:2"]
head_dims = [16]
dtypes = ["float32"]
directions = ["fwd"]
device = "cpu"
warmup = 0
repeat = 1
samples = 1
"""


@pytest.mark.slow  # the kit fixture pip-installs the plugins
def test_default_sweep_checks_every_row_and_report_marks_unchecked(kit, tmp_path):
    """No `check` in the spec: every row says how it was checked, and the wrong kernel is not ok."""
    (tmp_path / "default.toml").write_text(SWEEP)
    (tmp_path / "unchecked.toml").write_text(SWEEP + "check = false\n")
    *_, report = longca_many(kit["site"],
                             ["sweep", str(tmp_path / "default.toml"), "--output", str(tmp_path / "default")],
                             ["sweep", str(tmp_path / "unchecked.toml"), "--output", str(tmp_path / "unchecked")],
                             ["report", str(tmp_path / "unchecked")])
    rows = [json.loads(line) for line in (tmp_path / "default" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["checked"] == "full" for row in rows), rows
    status = {(row["kernel"], row["mask"]): row["status"] for row in rows}
    assert status == {("wrongcausal", "full"): "ok", ("wrongcausal", "causal"): "incorrect",
                      ("reference", "full"): "ok", ("reference", "causal"): "ok"}, status
    rows = [json.loads(line) for line in (tmp_path / "unchecked" / "results.jsonl").read_text().splitlines()]
    assert all(row["checked"] == "no" for row in rows)
    assert "not checked against the reference" in report and "†" in report, report
