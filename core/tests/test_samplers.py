import numpy as np
import pytest

from longca.plugins import get_registry
from longca.samplers import auto_corpus, load_buckets


@pytest.mark.parametrize("name", ["pile", "prolong64k", "prolong512k", "uniform", "fixed", "auto"])
@pytest.mark.parametrize("total", [1, 1000, 65536, 524288])
def test_lengths_fill_total_and_repeat(name, total):
    sampler = get_registry().sampler(name)
    a = sampler.sample(total, np.random.default_rng(5))
    b = sampler.sample(total, np.random.default_rng(5))
    assert a.sum() == total and (a >= 1).all()
    assert np.array_equal(a, b)


def test_corpus_lengths_stay_in_buckets():
    lows, highs, probs = load_buckets("pile")
    assert probs.sum() == pytest.approx(1.0)
    lengths = get_registry().sampler("pile").sample(10_000_000, np.random.default_rng(0))[:-1]
    assert lengths.max() < highs.max() and lengths.min() >= 1


def test_auto_thresholds():
    assert auto_corpus(12 * 1024) == "pile"
    assert auto_corpus(12 * 1024 + 1) == "prolong64k"
    assert auto_corpus(64 * 1024) == "prolong64k"
    assert auto_corpus(64 * 1024 + 1) == "prolong512k"


def test_fixed_and_uniform_params():
    reg = get_registry()
    assert reg.sampler("fixed").sample(1000, np.random.default_rng(0), doc_len=300).tolist() == [300, 300, 300, 100]
    u = reg.sampler("uniform").sample(5000, np.random.default_rng(0), min_len=10, max_len=20)
    assert (u[:-1] >= 10).all() and (u <= 20).all()


def test_corpus_documents_capped_or_split():
    sampler = get_registry().sampler("prolong512k")
    capped = sampler.sample(1 << 21, np.random.default_rng(1), max_len=4096)
    split = sampler.sample(1 << 21, np.random.default_rng(1), max_len=4096, split=1)
    assert capped.max() <= 4096 and split.max() <= 4096
    # cutting keeps every token of a long document: more documents of exactly max_len than capping gives
    assert (split == 4096).sum() > 2 * (capped == 4096).sum()
    with pytest.raises(Exception, match="split needs max_len"):
        sampler.sample(1000, np.random.default_rng(1), split=1)
