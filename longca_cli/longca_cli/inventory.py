"""What is installed, as rows for listings and `doctor`: kernels, masks, samplers, strategies."""
from __future__ import annotations

from typing import Any

from longca.plugins import Registry
from longca.specs import head_dims_text


def _availability(spec, plugin: str = "its plugin") -> tuple[bool, str]:
    """(available, why not); a probe that raises or never returns is the reason, naming its plugin."""
    from longca.bounded import HookHung, call_bounded

    try:
        reason = call_bounded(spec.available, f"available() of kernel {spec.name} ({plugin})")
    except HookHung as exc:
        reason = str(exc)
    except Exception as exc:  # noqa: BLE001 - a probe must not break a listing
        reason = f"{type(exc).__name__}: {exc}"
    return reason is None, reason or ""


def kernel_rows(registry: Registry) -> list[dict[str, Any]]:
    rows = []
    for name in registry.names("kernels"):
        entry = registry.entries["kernels"][name]
        spec = entry.spec
        available, reason = _availability(spec, f"plugin {entry.plugin.name} ({entry.plugin.distribution})")
        if entry.conflict:
            available, reason = False, entry.conflict
        rows.append({
            "name": name, "family": spec.family, "distribution": entry.plugin.distribution,
            "version": entry.plugin.version, "available": available, "reason": reason,
            "backward": spec.backward, "masks": registry.claimed_masks(spec.masks), "dtypes": list(spec.dtypes),
            "head_dims": head_dims_text(spec.head_dims), "gqa": spec.gqa,
            "deterministic": spec.deterministic if isinstance(spec.deterministic, bool) else False,
            "deterministic_reason": spec.deterministic if isinstance(spec.deterministic, str) else None,
            "devices": list(spec.devices),
            "min_compute_capability": ".".join(map(str, spec.min_compute_capability or ())) or None,
            "needs": hardware_needed(spec),
            "lse_primitives": spec.forward_lse is not None and spec.backward_lse is not None,
            "description": spec.description,
        })
    return rows


def hardware_needed(spec: Any) -> str:
    """The hardware a kernel runs on, in words: "cpu or cuda", "cuda sm90+" (its minimum compute capability)."""
    parts = []
    for device in spec.devices:
        if device == "cuda" and spec.min_compute_capability:
            major, minor = spec.min_compute_capability[:2]
            parts.append(f"cuda sm{major}{minor}+")
        else:
            parts.append(device)
    return " or ".join(parts)


def mask_rows(registry: Registry) -> list[dict[str, Any]]:
    return [{"name": n, "kind": e.spec.kind, "description": e.spec.description, "params": dict(e.spec.params),
             "uses_documents": e.spec.uses_documents, "seqlen_multiple": e.spec.seqlen_multiple,
             "distribution": e.plugin.distribution}
            for n, e in sorted(registry.entries["masks"].items())]


def sampler_rows(registry: Registry) -> list[dict[str, Any]]:
    return [{"name": n, "description": e.spec.description, "params": dict(e.spec.params),
             "distribution": e.plugin.distribution}
            for n, e in sorted(registry.entries["samplers"].items())]


def strategy_rows(registry: Registry) -> list[dict[str, Any]]:
    return [{"name": n, "description": e.spec.description, "masks": registry.claimed_masks(e.spec.masks),
             "options": dict(e.spec.options), "distribution": e.plugin.distribution, "version": e.plugin.version}
            for n, e in sorted(registry.entries["strategies"].items())]


def doctor_report(registry: Registry) -> dict[str, Any]:
    """Machine, torch and GPU, then every kernel: can it run here, and if not, why."""
    import torch

    machine: dict[str, Any] = {"torch": torch.__version__, "cuda_build": torch.version.cuda,
                               "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        machine.update(gpu=props.name, compute_capability=f"{props.major}.{props.minor}",
                       gpu_memory_gib=round(props.total_memory / 2**30, 1), gpu_count=torch.cuda.device_count())
    kernels = []
    for row in kernel_rows(registry):
        runs_on = [d for d in row["devices"] if d == "cpu" or machine["cuda_available"]]
        reason = row["reason"] if not row["available"] else ("" if runs_on else "needs a CUDA GPU; none is visible")
        kernels.append({"name": row["name"], "runs_here": bool(row["available"] and runs_on),
                        "devices": runs_on, "needs": row["needs"], "reason": reason})
    errors = [{"plugin": p.name, "distribution": p.distribution, "errors": p.errors}
              for p in registry.plugins if p.errors]
    from longca.plugins import env_info

    return {"machine": machine, "libraries": env_info(registry), "kernels": kernels, "plugin_errors": errors}
