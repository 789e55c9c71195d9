from longca.plugin import run_conformance


def test_conformance():
    run_conformance("sdpa")
