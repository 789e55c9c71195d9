"""Pictures for docs/context-parallel.md, drawn from the strategies' own layouts and schedules.

usage: python docs/scripts/cp_pictures.py [OUTPUT_DIR]   (default: docs/context-parallel)

- layouts.png: which rank computes each (query, key) pair of a causal and a causal-document
  mask under the contiguous and the zigzag layout (W = 4), with the work per rank.
- schedules.png: which rank's K/V block each rank holds at each step of the single ring
  (W = 4) and of LoongTrain's double ring (R = 8, two windows).
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from longca.masks import slices as sl  # noqa: E402
from longca.problem import Problem, build_mask  # noqa: E402
from longca_cp.calls import pair_calls  # noqa: E402
from longca_cp.layout import contiguous, zigzag  # noqa: E402
from longca_cp.schedule import RingSchedule  # noqa: E402

COLORS = plt.get_cmap("tab10").colors


def _owner_image(mask, layout) -> tuple[np.ndarray, list[int]]:
    """RGB image of the mask, each attended pair coloured by the rank that computes it."""
    s = mask.seqlen
    img = np.ones((s, s, 3))
    work = []
    for rank in range(layout.world_size):
        area = 0
        for call in pair_calls(mask.slices, layout.runs[rank], [(0, s)]):
            area += sl.area(call.slices)
            rows = np.concatenate([np.arange(a, b) for a, b in layout.runs[rank]])[call.q0:call.q1]
            block = sl.dense(call.slices, (0, call.q1 - call.q0), (0, call.k1 - call.k0))
            sub = img[rows, call.k0:call.k1]
            sub[block] = COLORS[rank]
            img[rows, call.k0:call.k1] = sub
        work.append(area)
    return img, work


def layouts(path: Path) -> None:
    world, s = 4, 256
    masks = [build_mask(Problem(kernel="reference", mask="causal", seqlen=s)),
             build_mask(Problem(kernel="reference", mask="causal_document", seqlen=s, sampler="fixed",
                                sampler_params={"doc_len": 128}, mask_params={"doc_lens": "150,40,66"}))]
    fig, axes = plt.subplots(2, 4, figsize=(13, 6.6), gridspec_kw={"width_ratios": [3, 1, 3, 1]})
    for row, mask in enumerate(masks):
        for col, (name, lay) in enumerate((("contiguous", contiguous(s, world)), ("zigzag", zigzag(s, world)))):
            img, work = _owner_image(mask, lay)
            ax = axes[row, 2 * col]
            ax.imshow(img, interpolation="nearest")
            ax.set_title(f"{mask.name}, {name} layout", fontsize=10)
            ax.set_xlabel("key")
            ax.set_ylabel("query")
            bar = axes[row, 2 * col + 1]
            bar.bar(range(world), np.array(work) / np.mean(work), color=COLORS[:world])
            bar.set_xticks(range(world))
            bar.set_title(f"work; max/mean {max(work) / np.mean(work):.2f}", fontsize=9)
            bar.set_xlabel("rank")
            bar.set_ylim(0, 2.6)
            bar.axhline(1.0, color="gray", lw=0.8, ls=":")
    fig.suptitle("Who computes what: the rank holding a query row computes its whole row (W = 4)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _schedule(ax, size: int, windows: int, title: str) -> None:
    w = size // windows
    steps = [(o, t) for o in range(windows) for t in range(w)]
    ring = Problem(kernel="reference", mask="full", seqlen=2 * size, world_size=size)
    schedule = RingSchedule(ring, build_mask(ring).slices, 1, windows, "zigzag")
    grid = np.array([[schedule.source(p, o, t) for o, t in steps] for p in range(size)])
    ax.imshow(grid, cmap="tab10" if size <= 10 else "tab20", vmin=0, vmax=9 if size <= 10 else 19, aspect="auto")
    for p in range(size):
        for j in range(len(steps)):
            ax.text(j, p, str(grid[p, j]), ha="center", va="center", fontsize=9, color="white")
    ax.set_xticks(range(len(steps)), [f"{o}.{t}" if windows > 1 else str(t) for o, t in steps])
    ax.set_yticks(range(size))
    ax.set_xlabel("step (outer.inner)" if windows > 1 else "step")
    ax.set_ylabel("ring rank")
    for a in range(1, windows):
        ax.axhline(a * w - 0.5, color="black", lw=2)
        ax.axvline(a * w - 0.5, color="black", lw=2, ls="--")
    ax.set_title(title, fontsize=10)


def schedules(path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1, 2]})
    _schedule(axes[0], 4, 1, "ring-p2p, W = 4: source of the K/V block in hand")
    _schedule(axes[1], 8, 2, "loongtrain double ring, R = 8, 2 windows of 4 (black lines)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "context-parallel"
    out.mkdir(parents=True, exist_ok=True)
    layouts(out / "layouts.png")
    schedules(out / "schedules.png")
    print(f"wrote {out / 'layouts.png'}, {out / 'schedules.png'}")


if __name__ == "__main__":
    main()
