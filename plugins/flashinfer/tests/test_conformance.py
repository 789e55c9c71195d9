from longca.plugin import run_conformance


def test_conformance():
    """On a CPU the CUDA cases skip (the kernel is refused on CPU with a reason); all run on a GPU."""
    run_conformance("flashinfer")
