"""`longca recommend` tries the option sets a strategy's spec lists (`CPStrategySpec.variants`), not a
list of built-in names: a third-party strategy's variants are simulated, and one without gets its defaults."""
from __future__ import annotations

from dataclasses import replace

from longca.plugins import PluginInfo, load_registry
from longca_cp import plugin as cp
from longca_sim.recommend import Setting, recommend, variants
from longca_sim.simulate import default_pricing
from longca_sim.topology import preset


def _registry_with(*specs):
    registry = load_registry()
    for spec in specs:
        registry._add("strategies", spec, PluginInfo("test", "longca-plugin-test", "0", "tests"))
    return registry


def test_a_third_party_strategys_variants_are_what_recommend_tries():
    tried = [{"layout": "contiguous"}, {"layout": "doc_zigzag"}]
    asked = []

    def mine(world, heads_q, gpus_per_node):
        asked.append((world, heads_q, gpus_per_node))
        return tried

    ring = cp.hybrid_strategy("my-ring", "a ring under another name")
    plain = replace(ring, name="my-plain", variants=None)  # no variants: its defaults only
    registry = _registry_with(replace(ring, variants=mine), plain)
    assert variants("my-plain", 8, 8, 8, registry) == [{}]
    topology = preset("h200-sxm")
    setting = Setting(mask="causal", seqlen=16384, gpus=4, heads_q=8, heads_kv=8, samples=1)
    lines = recommend(setting, {"fa2": default_pricing("fa2", topology)}, topology,
                      strategies=["my-ring", "my-plain"], registry=registry)
    assert asked == [(4, 8, 8)]
    assert sorted((ln.options for ln in lines if ln.strategy == "my-ring"), key=str) == tried  # ranked by time
    assert [ln.options for ln in lines if ln.strategy == "my-plain"] == [{"layout": "zigzag"}]  # resolved defaults
    assert all(ln.status == "ok" for ln in lines), [(ln.strategy, ln.reason) for ln in lines]


def test_every_installed_strategys_variants_come_from_its_spec():
    registry = load_registry()
    for name in registry.names("strategies"):  # the built-ins and any other installed one
        spec = registry.strategy(name)
        assert variants(name, 8, 8, 8, registry) == (spec.variants(8, 8, 8) if spec.variants else [{}]), name
    assert all(registry.strategy(n).variants is not None for n in ("ulysses", "ring-p2p", "ring-allgather", "usp",
                                                               "loongtrain"))
    assert variants("ulysses", 8, 8, 8, registry) == [{}]
