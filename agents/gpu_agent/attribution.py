"""Which allocation each GPU process belongs to, and which processes break the rules.

Rules, in order, for each process on a card:

1. Its environment names an allocation (``GPU_PORTAL_ALLOCATION``, handed out with
   the slice's launch settings) that exists in the desired state: that one. If the
   allocation is on another card, the process is also a ``wrong_gpu`` violation.
2. Otherwise its owner matches the ``owner`` of slices on this card: the first of
   them by allocation id (the environment variable is how users disambiguate).
3. Otherwise it is ``unallocated``.

A process of a slice smaller than its card that was started without a memory limit, or
with one above the slice (its environment, gpu_agent/limits.py: the driver's, HAMi-core's
or MPS's), is ``unlimited``: nothing holds it to its share. MIG slices are held by the
card itself; a process whose environment could not be read is not judged.

Then each allocation whose processes together use more memory than its slice is an
``over_memory`` violation. Pure functions over the snapshot's dataclasses: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.gpu_agent.desired import Slice
from agents.gpu_agent.model import AllocationUsage, GpuReading, ProcessReading, Violation


def _card_uuids(gpu: GpuReading) -> set[str]:
    # A slice may name the card or one of its MIG devices.
    uuids = {gpu.uuid} if gpu.uuid else set()
    uuids.update(m.uuid for m in gpu.mig_devices or () if m.uuid)
    return uuids


def attribute(
    gpus: Sequence[GpuReading], slices: Sequence[Slice]
) -> tuple[list[AllocationUsage], list[Violation]]:
    """Set ``allocation_id`` on processes; return per-allocation usage and violations."""
    by_id = {s.allocation_id: s for s in slices}
    usage = {
        s.allocation_id: AllocationUsage(s.allocation_id, s.gpu_uuid, s.memory_mib, s.compute_pct)
        for s in slices
    }
    pids: dict[str, list[int]] = {s.allocation_id: [] for s in slices}
    violations: list[Violation] = []
    for gpu in gpus:
        uuids = _card_uuids(gpu)
        on_card = sorted((s for s in slices if s.gpu_uuid in uuids), key=lambda s: s.allocation_id)
        for proc in gpu.processes or ():
            chosen = _choose(proc, by_id, on_card)
            if chosen is None:
                violations.append(_violation("unallocated", gpu, proc))
                continue
            if chosen.gpu_uuid not in uuids:
                violations.append(_violation("wrong_gpu", gpu, proc, chosen.allocation_id))
            elif _unlimited(proc, chosen, gpu):
                violations.append(_violation("unlimited", gpu, proc, chosen.allocation_id,
                                             limit_mib=chosen.memory_mib))  # fmt: skip
            entry = usage[chosen.allocation_id]
            entry.process_count += 1
            entry.memory_used_mib += proc.memory_used_mib or 0
            pids[chosen.allocation_id].append(proc.pid)
    for allocation_id, entry in usage.items():
        if entry.memory_used_mib > entry.memory_limit_mib:
            violations.append(
                Violation(
                    kind="over_memory",
                    gpu_uuid=entry.gpu_uuid,
                    pids=sorted(pids[allocation_id]),
                    user=by_id[allocation_id].owner,
                    allocation_id=allocation_id,
                    memory_used_mib=entry.memory_used_mib,
                    memory_limit_mib=entry.memory_limit_mib,
                )
            )
    return list(usage.values()), violations


def _choose(proc: ProcessReading, by_id: dict[str, Slice], on_card: list[Slice]) -> Slice | None:
    if proc.allocation_env and proc.allocation_env in by_id:
        proc.allocation_id, proc.attributed_by = proc.allocation_env, "environment"
        return by_id[proc.allocation_env]
    if proc.user:
        for candidate in on_card:
            if candidate.owner == proc.user:
                proc.allocation_id, proc.attributed_by = candidate.allocation_id, "owner"
                return candidate
    return None


def _unlimited(proc: ProcessReading, chosen: Slice, gpu: GpuReading) -> bool:
    if proc.memory_limit is None or chosen.gpu_uuid.startswith("MIG-"):
        return False
    if not gpu.memory_total_mib or chosen.memory_mib >= gpu.memory_total_mib:
        return False  # a whole card, or a card whose size is unknown
    return proc.memory_limit == "none" or proc.memory_limit[1] > chosen.memory_mib


def _violation(
    kind: str,
    gpu: GpuReading,
    proc: ProcessReading,
    allocation_id: str | None = None,
    limit_mib: int | None = None,
) -> Violation:
    return Violation(
        kind=kind,  # type: ignore[arg-type]
        gpu_uuid=gpu.uuid,
        pids=[proc.pid],
        user=proc.user,
        allocation_id=allocation_id,
        memory_used_mib=proc.memory_used_mib,
        memory_limit_mib=limit_mib,
    )
