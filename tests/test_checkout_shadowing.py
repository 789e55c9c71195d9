"""A script run from the folder that holds a checkout named `longca` (what `git clone` makes) imports
the installed longca, not the checkout folder as a namespace package (make install's compat mode)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def test_a_script_beside_a_checkout_named_longca_imports_longca(tmp_path):
    (tmp_path / "longca").symlink_to(CHECKOUT, target_is_directory=True)
    (tmp_path / "script.py").write_text("from longca.plugins import Registry\nimport longca\nprint(longca.__file__)\n")
    for command in ([sys.executable, "script.py"], [sys.executable, "-c", "from longca.plugins import Registry"]):
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (f"{command}: {done.stderr[-2000:]} (is longca-core installed by "
                                      f"`make install`, as a compat editable install or a wheel?)")


def test_the_kit_run_from_the_checkout_is_the_installed_package_not_its_folder():
    """From the checkout root, `longca_testing/` is also a folder: the installed package (its
    `__init__` with conformance_tests) must win, as pytest run there imports it."""
    code = "import longca_testing, longca_runner; longca_testing.conformance_tests; print(longca_testing.__file__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=CHECKOUT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{done.stderr[-2000:]} (installed by `make install`, compat editable or a wheel?)"
