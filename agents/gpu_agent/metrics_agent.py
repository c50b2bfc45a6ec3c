"""The agent's own series: its health, XID counts, processes, allocations, violations.

Named ``gpu_agent_*`` so they never collide with a future DCGM field. Per-GPU
ones carry the same labels as the DCGM series, so they join on ``UUID``.
"""

from __future__ import annotations

from collections import Counter

from agents.gpu_agent.exposition import family, labels, number
from agents.gpu_agent.model import GpuReading, NodeSnapshot

ALLOCATION_SERIES = (
    (
        "gpu_agent_allocation_memory_used_mib",
        "memory_used_mib",
        "Memory the allocation's processes use (in MiB).",
    ),
    (
        "gpu_agent_allocation_memory_limit_mib",
        "memory_limit_mib",
        "Memory the allocation may use (in MiB).",
    ),
    (
        "gpu_agent_allocation_compute_limit_pct",
        "compute_pct",
        "Compute share of the allocation (in %).",
    ),
    ("gpu_agent_allocation_processes", "process_count", "Processes attributed to the allocation."),
)


def render_agent_series(
    lines: list[str], snapshot: NodeSnapshot, gpu_labels: list[tuple[GpuReading, str]]
) -> None:
    host = labels([("Hostname", snapshot.hostname)])
    family(
        lines,
        "gpu_agent_last_collect_success_timestamp_seconds",
        "gauge",
        "Unix time of the agent's last successful collection.",
        [f"gpu_agent_last_collect_success_timestamp_seconds{{{host}}} "
         f"{number(snapshot.collected_at)}"],
    )  # fmt: skip
    family(
        lines,
        "gpu_agent_collect_duration_seconds",
        "gauge",
        "Seconds the agent's last successful collection took.",
        [f"gpu_agent_collect_duration_seconds{{{host}}} {number(snapshot.collect_duration_s)}"],
    )
    family(
        lines,
        "gpu_agent_gpu_lost",
        "gauge",
        "1 when the card stopped answering (NVML GpuIsLost or a fatal XID), else 0.",
        [f"gpu_agent_gpu_lost{{{text}}} {int(gpu.health == 'lost')}" for gpu, text in gpu_labels],
    )
    xid_counts, xid_seen = [], []
    for gpu, text in gpu_labels:
        for entry in gpu.xid_errors or ():
            code = labels([("xid", str(entry.xid))])
            xid_counts.append(f"gpu_agent_xid_errors_total{{{text},{code}}} {entry.count}")
            xid_seen.append(
                f"gpu_agent_xid_last_seen_timestamp_seconds{{{text},{code}}} "
                f"{number(entry.last_seen_at)}"
            )
    family(
        lines,
        "gpu_agent_xid_errors_total",
        "counter",
        "XID errors seen on the card since the agent started, per XID code.",
        xid_counts,
    )
    family(
        lines,
        "gpu_agent_xid_last_seen_timestamp_seconds",
        "gauge",
        "Unix time an XID code was last seen on the card.",
        xid_seen,
    )
    family(
        lines,
        "gpu_agent_gpu_processes",
        "gauge",
        "Compute processes running on the card.",
        [
            f"gpu_agent_gpu_processes{{{text}}} {len(gpu.processes)}"
            for gpu, text in gpu_labels
            if gpu.processes is not None
        ],
    )
    _allocations(lines, snapshot, gpu_labels)


def _allocations(
    lines: list[str], snapshot: NodeSnapshot, gpu_labels: list[tuple[GpuReading, str]]
) -> None:
    if snapshot.allocations is None:
        return
    by_uuid = {gpu.uuid: gpu for gpu, _ in gpu_labels}
    texts = []
    for usage in snapshot.allocations:
        gpu = by_uuid.get(usage.gpu_uuid)
        pairs = [
            ("allocation", usage.allocation_id),
            ("gpu", str(gpu.index) if gpu else ""),
            ("UUID", usage.gpu_uuid),
            ("modelName", (gpu.name if gpu else None) or ""),
            ("Hostname", snapshot.hostname),
        ]
        texts.append((usage, labels(pairs)))
    for series, attribute, help_text in ALLOCATION_SERIES:
        samples = [f"{series}{{{text}}} {getattr(usage, attribute)}" for usage, text in texts]
        family(lines, series, "gauge", help_text, samples)
    counts = Counter((v.gpu_uuid or "", v.kind) for v in snapshot.violations or ())
    family(
        lines,
        "gpu_agent_violations",
        "gauge",
        "Processes using a card outside their allocation, by kind.",
        [
            f"gpu_agent_violations{{{labels(pairs)}}} {n}"
            for (uuid, kind), n in sorted(counts.items())
            if (pairs := [("UUID", uuid), ("kind", kind), ("Hostname", snapshot.hostname)])
        ],
    )
