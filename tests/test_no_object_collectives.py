"""Nothing a CP rank receives is unpickled: gloo ranks listen on 127.0.0.1, and torch's object
collectives (all_gather_object, broadcast_object_list, ...) unpickle whatever arrives. The CP
runtime, the strategy plugins and the benchmark scripts send tensors only (docs/reliability.md)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OBJECT_COLLECTIVE = re.compile(r"\b(all_gather_object|broadcast_object_list|gather_object|scatter_object_list|"
                               r"send_object_list|recv_object_list)\s*\(")


def test_cp_code_uses_no_object_collective():
    sources = [*(ROOT / "longca_cp").rglob("*.py"), *(ROOT / "plugins").rglob("*.py"), *(ROOT / "core").rglob("*.py"),
               *(ROOT / "benchmarks").rglob("*.py")]
    assert len(sources) > 20
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sources
             for n, line in enumerate(p.read_text().splitlines(), 1) if OBJECT_COLLECTIVE.search(line)]
    assert not found, found
