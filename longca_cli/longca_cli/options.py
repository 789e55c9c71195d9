"""The problem options run, dist-run, show-mask and recommend share (typer options), declared once."""
from __future__ import annotations

from typing import Any

import typer


def Mask(default: Any = "causal") -> Any:  # noqa: N802 - read as a type at the call site
    return typer.Option(default, help="mask name (see list-masks)")


def Seqlen(default: Any = "8k", help: str = "total tokens: 8k, 8192, 1M") -> Any:  # noqa: N802
    return typer.Option(default, help=help)


def Heads(default: str = "32:32", help: str = "query:kv heads, e.g. 64:8") -> Any:  # noqa: N802
    return typer.Option(default, help=help)


HeadDim = typer.Option(128, help="dimension of each head (Q and K; V too unless --head-dim-v)")
HeadDimV: Any = typer.Option(None, "--head-dim-v", help="V's head dim where it differs from --head-dim (MLA-style: "
                                                        "--head-dim 192 --head-dim-v 128)")
Deterministic = typer.Option(False, "--deterministic",
                             help="the backward through the kernel's deterministic algorithm (bwd and fwdbwd; "
                                  "refused by kernels without one)")
Sinks = typer.Option(False, "--sinks", help="one learnable attention-sink logit per query head (forward and its "
                                           "gradient; refused by kernels without them)")
Batch = typer.Option(1, help="sequences per call")
Dtype = typer.Option("bfloat16", help="bfloat16, float16, float32, float8_e4m3fn (fp8) or float8_e5m2 (fp8_e5m2)")
Direction = typer.Option("fwd", help="fwd, bwd or fwdbwd")
Device: Any = typer.Option(None, help="cpu or cuda (default: cuda when present)")
Sampler = typer.Option("auto", help="document-length sampler (see list-samplers)")
Seed = typer.Option(0, help="seed of the mask draws and the inputs")
MaskParam: Any | None = typer.Option(None, "--mask-param", help="override a mask parameter, e.g. window=512")
SamplerParam: Any | None = typer.Option(None, "--sampler-param", help="sampler parameter, e.g. doc_len=2048")
Warmup = typer.Option(5, help="untimed calls before timing")
Repeat = typer.Option(None, help="timed calls (median reported); default: until the 95 % interval of the "
                                  "median is within +-1 % (5 to 100 calls, at most 2 s of them; CP cases: 20)")
Samples = typer.Option(5, help="mask draws for document masks (median reported)")
Format = typer.Option("table", "--format", "-f", help="table or json")
