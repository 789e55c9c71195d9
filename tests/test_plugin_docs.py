"""The plugin docs stay true: every hook and spec field is documented in docs/hooks.md with its
signature, and the worked examples of docs/writing-a-plugin.md install and run as shown."""
from __future__ import annotations

import dataclasses
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from longca import hookspecs, specs

ROOT = Path(__file__).resolve().parents[1]
HOOKS_DOC = ROOT / "docs" / "hooks.md"
GUIDE = ROOT / "docs" / "writing-a-plugin.md"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_plugin_kit import env_with, pip_install_target  # noqa: E402


def hook_names() -> list[str]:
    return sorted(name for name, fn in vars(hookspecs).items()
                  if name.startswith("longca_") and hasattr(fn, f"{hookspecs.PROJECT}_spec"))


def signature(fn) -> str:
    """`name(arg: type) -> return`, from the hookspec's (string) annotations, quotes removed."""
    sig = inspect.signature(fn)

    def text(annotation) -> str:
        return str(annotation).strip("'\"")

    params = ", ".join(f"{p.name}: {text(p.annotation)}" if p.annotation is not p.empty else p.name
                       for p in sig.parameters.values())
    return f"{fn.__name__}({params}) -> {text(sig.return_annotation)}"


def test_hookspecs_are_found():
    assert {"longca_kernels", "longca_masks", "longca_samplers", "longca_cp_strategies",
            "longca_env_info"} <= set(hook_names())


@pytest.mark.parametrize("name", hook_names())
def test_every_hook_is_documented_with_its_signature(name):
    doc = HOOKS_DOC.read_text()
    expected = signature(getattr(hookspecs, name))
    assert f"## `{expected}`" in doc, (f"docs/hooks.md has no section '## `{expected}`': document the hook "
                                       f"{name} (what it returns, when it is called) with this exact signature")


def test_no_documented_hook_is_stale():
    documented = re.findall(r"^## `(longca_\w+)\(", HOOKS_DOC.read_text(), flags=re.M)
    assert sorted(documented) == hook_names()


@pytest.mark.parametrize("cls", [specs.KernelSpec, specs.MaskSpec, specs.SamplerSpec, specs.CPStrategySpec],
                         ids=lambda c: c.__name__)
def test_every_spec_field_is_documented(cls):
    doc = HOOKS_DOC.read_text()
    missing = [f.name for f in dataclasses.fields(cls) if f"| `{f.name}` |" not in doc]
    assert not missing, f"docs/hooks.md does not document {cls.__name__} fields {missing}"


# ---------------------------------------------------------------- the worked examples

FILE_BLOCK = re.compile(r"```python\n# file: (\S+)\n(.*?)```", re.S)
DIST = "longca-plugin-docsdemo"


def guide_files() -> dict[str, str]:
    return {path: f"# file: {path}\n{body}" for path, body in FILE_BLOCK.findall(GUIDE.read_text())}


def build_docsdemo(root: Path) -> Path:
    """One distribution holding every `# file:` block of the guide; one entry point per *hooks.py."""
    files = guide_files()
    for path, text in files.items():
        dest = root / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        init = dest.parent / "__init__.py"
        if not init.exists():
            init.write_text('"""Worked examples of docs/writing-a-plugin.md."""\n')
    hooks = sorted(p for p in files if p.endswith("hooks.py"))
    entry_points = "\n".join(f'docsdemo-{Path(p).stem.removesuffix("_hooks")} = "{p[:-3].replace("/", ".")}"'
                             for p in hooks)
    (root / "pyproject.toml").write_text(f"""[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{DIST}"
version = "0.0.1"

[project.entry-points.longca]
{entry_points}

[tool.setuptools.packages.find]
include = ["longca_plugin_docsdemo*"]
""")
    return root


# (command as in the guide, extra flags for a quick machine-readable run)
QUICK = ["--warmup", "0", "--repeat", "1", "--samples", "1", "-f", "json"]
COMMANDS = {
    "mask_run": ("longca run --kernel per_doc_sdpa --mask chunked_causal --mask-param chunk=256 --check",
                 ["--seqlen", "1k", "--heads", "4:2", "--head-dim", "32", "--dtype", "float32", "--device", "cpu",
                  "--direction", "fwdbwd", *QUICK]),
    "sampler_run": ("longca run --kernel per_doc_sdpa --mask causal_document --sampler lognormal "
                    "--sampler-param median=64 --check",
                    ["--seqlen", "1k", "--heads", "4:2", "--head-dim", "32", "--dtype", "float32", "--device", "cpu",
                     "--direction", "fwdbwd", *QUICK]),
    "show_mask": ("longca show-mask chunked_causal --seqlen 4k --mask-param chunk=1024", ["-f", "json"]),
    "dist_run": ("longca dist-run --strategy allgather_demo --inner reference --nproc 2 --device cpu "
                 "--mask causal_document --seqlen 1k --heads 4:2 --head-dim 32 --dtype float32 --direction fwdbwd "
                 "--check", QUICK),
}

# Runs every command through the CLI app in one interpreter (torch is imported once); prints one
# JSON object. The suites run from the plugin's own tests file, as the guide shows it.
DRIVER = """
import json, shlex, sys
from typer.testing import CliRunner
from longca_cli.main import app
commands = json.loads(sys.argv[1])
out = {}
for key, args in commands.items():
    result = CliRunner().invoke(app, args)
    out[key] = {"exit_code": result.exit_code, "output": result.output}
print("RESULT " + json.dumps(out))
"""


def one_line(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def test_guide_commands_are_the_tested_ones():
    guide = one_line(GUIDE.read_text())
    for base, _ in COMMANDS.values():
        assert base in guide, f"docs/writing-a-plugin.md no longer shows: {base}"


@pytest.mark.slow  # pip-installs the guide's examples
def test_worked_examples_install_and_run(tmp_path):
    assert set(guide_files()) == {"longca_plugin_docsdemo/kernel_hooks.py", "longca_plugin_docsdemo/mask_hooks.py",
                                  "longca_plugin_docsdemo/sampler_hooks.py", "longca_plugin_docsdemo/cp_hooks.py",
                                  "longca_plugin_docsdemo/cp_algorithm.py", "tests/test_docsdemo.py"}
    site = tmp_path / "site"
    root = build_docsdemo(tmp_path / "docsdemo")
    (root / "tests" / "__init__.py").unlink()  # a plugin's tests folder, as pytest finds it
    pip_install_target([root], site)
    commands = {key: base.split()[1:] + extra for key, (base, extra) in COMMANDS.items()}
    commands["plugins"] = ["plugins", "-f", "json"]
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands)], env=env_with(site),
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])

    def payload(key: str):
        entry = result[key]
        assert entry["exit_code"] == 0, f"{key}: {entry['output'][-2000:]}"
        return json.loads(entry["output"])

    plugins = {p["name"]: p for p in payload("plugins") if p["distribution"] == DIST}
    assert set(plugins) == {"docsdemo-kernel", "docsdemo-mask", "docsdemo-sampler", "docsdemo-cp"}
    assert all(not p["errors"] for p in plugins.values()), plugins
    assert plugins["docsdemo-cp"]["registered"] == {"strategies": ["allgather_demo"]}
    for key in ("mask_run", "sampler_run", "dist_run"):
        row = payload(key)
        assert row["status"] == "ok" and row["rel_err"] < 1e-4, (key, row)
    assert payload("sampler_run")["sampler"] == "lognormal"
    assert payload("dist_run")["world_size"] == 2
    mask = payload("show_mask")
    assert mask["area"] == 4 * 1024 * 1025 / 2 and mask["params"]["chunk"] == 1024
    # the plugin's own tests as the guide shows them: the four suites and a test of the mask
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "tests"], cwd=root,
                          env=env_with(site), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for case in ("test_mask[area]", "test_sampler[sums]", "test_strategy[world-2]", "test_strategy[world-4]",
                 "test_kernel[spec]", "test_kernel[mask-chunked_causal-bwd-cpu]", "test_kernel[dtype-bfloat16-fwd-cpu]",
                 "test_chunks_of_256"):
        assert f"PASSED tests/test_docsdemo.py::{case}" in proc.stdout, proc.stdout[-4000:]


FACE_IMPORTS = {"from longca import plugin", "from longca_cp import plugin as cp",
                "from longca_flashplan import plugin as flash", "import longca_testing"}


def test_guide_imports_only_the_faces():
    """Every import from longca in docs/writing-a-plugin.md's code is one of the faces' import lines."""
    imports = re.findall(r"^\s*(?:from|import) longca\S*.*$", GUIDE.read_text(), flags=re.M)
    assert imports and all(line.strip() in FACE_IMPORTS for line in imports), imports
