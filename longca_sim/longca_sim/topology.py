"""The price of transfers: GPUs per node, and bandwidth + latency per collective inside and across nodes.

A transfer of `nbytes` (NCCL's tests' size convention, see `schedule.CommOp`) over a group of n
ranks takes

    latency + nbytes * (n - 1) / n / bus_bandwidth          (collectives; p2p: nbytes / bandwidth)

with the figures of the slowest link the group spans: inside a node (NVLink) when every member
is on one node, else across nodes (InfiniBand). An all-to-all that spans nodes sends the part
for other nodes over each GPU's own NIC while the on-node part goes over NVLink, at the same
time. An all-gather or reduce-scatter that spans nodes runs as NCCL's rings do, one ring per
NIC: the k members a node holds cross nodes on k NICs at once, so its bus bandwidth is k times a
NIC's (at most NVLink's). A send/recv between nodes uses one NIC.

The presets are datasheet figures times an efficiency that is an assumption, not a measurement:
NVLink 4 gives 900 GB/s per GPU in both directions together (NVIDIA H100 and H200 SXM
datasheets), 450 GB/s each way, of which 80 % is taken as NCCL bus bandwidth (70 % for
all-to-all); one 400 Gb/s InfiniBand NIC (ConnectX-7) per GPU is 50 GB/s, of which 85 % is
taken. Latencies: 10 µs per collective and 8 µs per send/recv inside a node, 25 µs across.
`longca comm-bench` measures these on the machine at hand and writes a calibration file whose
figures replace the preset's (`Topology.with_calibration`); every figure can also be set by hand.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from longca.errors import LongcaError
from longca_cp.schedule import COLLECTIVES, CommOp


@dataclass(frozen=True)
class Link:
    bandwidth_gbs: float  # bus bandwidth, GB/s (1e9 bytes)
    latency_us: float

    def ms(self, link_bytes: float) -> float:
        return self.latency_us * 1e-3 + link_bytes / (self.bandwidth_gbs * 1e9) * 1e3


@dataclass(frozen=True)
class Topology:
    """A cluster of nodes with `gpus_per_node` GPUs; links per collective kind inside and across nodes."""

    name: str
    gpus_per_node: int
    intra: dict[str, Link]
    inter: dict[str, Link]
    hbm_gbs: float  # device memory bandwidth, for the lse merges and gradient sums
    memory_gb: float
    sources: dict[str, str] = field(default_factory=dict)

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def op_ms(self, op: CommOp) -> float:
        """Time of one transfer of `op` (not times its count)."""
        n = op.group_size
        if op.kind == "p2p":
            same = self.node(op.ranks[0]) == self.node(op.ranks[1])
            return (self.intra if same else self.inter)["p2p"].ms(op.nbytes)
        share = op.nbytes * (n - 1) / n
        nodes = {self.node(r) for r in op.ranks}
        if len(nodes) == 1:
            return self.intra[op.kind].ms(share)
        on_node = n / len(nodes)
        if op.kind == "all_to_all":  # on-node part over NVLink while the rest crosses InfiniBand
            off = op.nbytes * (n - on_node) / n
            near = op.nbytes * (on_node - 1) / n
            return max(self.inter[op.kind].ms(off), self.intra[op.kind].ms(near))
        # ring collectives: one ring per NIC, each crossing nodes on its own NIC, so the group's members
        # on a node add their NICs' bandwidth up (bounded by NVLink)
        link = self.inter[op.kind]
        bandwidth = min(self.intra[op.kind].bandwidth_gbs, link.bandwidth_gbs * on_node)
        return Link(bandwidth, link.latency_us).ms(share)

    def with_calibration(self, path: Path) -> Topology:
        """Figures measured by `longca comm-bench` replace the preset's where present."""
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise LongcaError(f"cannot read calibration {path}: {exc}") from None
        intra, inter = dict(self.intra), dict(self.inter)
        for where, table in (("intra", intra), ("inter", inter)):
            for kind, fig in doc.get(where, {}).items():
                if kind not in COLLECTIVES:
                    raise LongcaError(f"calibration {path}: unknown collective {kind!r}")
                table[kind] = Link(float(fig["bandwidth_gbs"]), float(fig["latency_us"]))
        sources = {**self.sources, "calibration": f"{path} ({doc.get('machine', 'unknown machine')})"}
        return replace(self, intra=intra, inter=inter, sources=sources)

    def override(self, gpus_per_node: int | None = None, figures: dict[str, float] | None = None) -> Topology:
        """Hand-set figures: `intra.p2p.bandwidth_gbs=300`, `inter.all_to_all.latency_us=30`, `hbm_gbs=...`."""
        topo = replace(self, gpus_per_node=gpus_per_node) if gpus_per_node else self
        for key, value in (figures or {}).items():
            parts = key.split(".")
            if parts == ["hbm_gbs"]:
                topo = replace(topo, hbm_gbs=figure_value(key, value))
                continue
            if parts == ["memory_gb"]:
                topo = replace(topo, memory_gb=figure_value(key, value))
                continue
            if len(parts) != 3 or parts[0] not in ("intra", "inter") or parts[1] not in COLLECTIVES \
                    or parts[2] not in ("bandwidth_gbs", "latency_us"):
                raise LongcaError(f"unknown topology figure {key!r}; use e.g. intra.p2p.bandwidth_gbs, "
                                  f"inter.all_to_all.latency_us, hbm_gbs, memory_gb")
            table = dict(getattr(topo, parts[0]))
            number = figure_value(key, value, zero_ok=parts[2] == "latency_us")
            table[parts[1]] = replace(table[parts[1]], **{parts[2]: number})
            topo = replace(topo, intra=table) if parts[0] == "intra" else replace(topo, inter=table)
        return topo

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def figure_value(key: str, value: Any, zero_ok: bool = False) -> float:
    """A hand-set figure as a finite positive number (a latency may be 0): `abc`, `-5` or `nan`
    would price every case as nonsense, so they are refused with one line."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LongcaError(f"--set {key}={value}: not a number") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero_ok):
        raise LongcaError(f"--set {key}={value}: must be a finite number "
                          f"{'>= 0' if zero_ok else '> 0'}")
    return number


def _links(bandwidth: float, a2a: float, latency: float, p2p_latency: float) -> dict[str, Link]:
    return {"all_to_all": Link(a2a, latency), "all_gather": Link(bandwidth, latency),
            "reduce_scatter": Link(bandwidth, latency), "p2p": Link(bandwidth, p2p_latency)}


_NVLINK = 450.0  # GB/s each way, NVLink 4 (900 GB/s per GPU both ways: H100 / H200 SXM datasheets)
_IB = 50.0  # GB/s, one 400 Gb/s InfiniBand NIC per GPU
_SOURCES = {"nvlink": "NVLink 4, 900 GB/s per GPU both ways (NVIDIA H100/H200 SXM datasheets); "
                      "80 % of 450 GB/s taken as bus bandwidth (70 % for all-to-all): an assumption",
            "infiniband": "one 400 Gb/s NIC per GPU (ConnectX-7, DGX H100/H200); 85 % of 50 GB/s taken: an assumption",
            "latency": "10 us per collective, 8 us per send/recv inside a node, 25 us across: assumptions"}
_NVLINK5 = 900.0  # GB/s each way, NVLink 5 (1.8 TB/s per GPU both ways: DGX B200 user guide)
_B200_SOURCES = {
    "gpus_per_node": "8 B200 GPUs per DGX B200 (docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html)",
    "nvlink": "NVLink 5, 1.8 TB/s per GPU both ways, 18 links (DGX B200 user guide: 2 NVSwitches, 14.4 TB/s aggregate "
              "= 8 x 1.8 TB/s); 80 % of 900 GB/s taken as bus bandwidth (70 % for all-to-all): an assumption",
    "infiniband": "one 400 Gb/s NIC per GPU (8 x ConnectX-7, InfiniBand NDR, DGX B200 user guide); 85 % of 50 GB/s "
                  "taken: an assumption. The published B200 runs do not state their network",
    "latency": "10 us per collective, 8 us per send/recv inside a node, 25 us across: assumptions (as h100-sxm)",
    "hbm": "8 TB/s HBM3e per GPU (DGX B200: 64 TB/s for 8 GPUs, nvidia.com/en-us/data-center/dgx-b200), 80 % taken",
    "memory": "180 GB per GPU (DGX B200: 1,440 GB HBM3e for 8 GPUs, nvidia.com/en-us/data-center/dgx-b200)"}
PRESETS = {
    "h100-sxm": Topology("h100-sxm", 8, _links(0.8 * _NVLINK, 0.7 * _NVLINK, 10, 8),
                         _links(0.85 * _IB, 0.85 * _IB, 25, 25), 3350 * 0.8, 80,
                         {**_SOURCES, "hbm": "3.35 TB/s HBM3 (H100 SXM datasheet), 80 % taken", "memory": "80 GB"}),
    "h200-sxm": Topology("h200-sxm", 8, _links(0.8 * _NVLINK, 0.7 * _NVLINK, 10, 8),
                         _links(0.85 * _IB, 0.85 * _IB, 25, 25), 4800 * 0.8, 141,
                         {**_SOURCES, "hbm": "4.8 TB/s HBM3e (H200 SXM datasheet), 80 % taken", "memory": "141 GB"}),
    "b200": Topology("b200", 8, _links(0.8 * _NVLINK5, 0.7 * _NVLINK5, 10, 8),
                     _links(0.85 * _IB, 0.85 * _IB, 25, 25), 8000 * 0.8, 180, _B200_SOURCES),
}


def preset(name: str) -> Topology:
    if name not in PRESETS:
        raise LongcaError(f"unknown topology {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
