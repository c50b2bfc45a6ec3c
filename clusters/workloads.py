"""What a workload in a cluster asks for, read from its object alone (plain dicts as the API
answers them; no calls, no database): whether it waits for the portal, its size, who it is,
whether it has finished, and the patch that lifts the portal's gate.

Two kinds are workloads: a Pod, and a Job, whose Pods then belong to it (one request for
the Job, not one per Pod). Without Kueue the gate is the Pod scheduling gate
``gpu-portal.io/approval``, on the Pod or in the Job's pod template (the Job controller
copies it to every Pod it makes); under Kueue it is the entry ``gpu-portal/approval`` of the
annotation ``kueue.x-k8s.io/admission-gated-by`` on the Pod or the Job (kueue#9482).

A workload is sized the cluster's way: HAMi's limits on its containers, or on a DRA cluster
the ResourceClaimTemplates its Pods claim devices through (``capacity.requests`` of the
cluster's device class: ``cores`` in %, ``memory`` as a quantity).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.utils.translation import gettext as _
from kubernetes.utils import parse_quantity

from clusters.render import HAMI_CORES, HAMI_GPU, HAMI_MEMORY

GATE = "gpu-portal.io/approval"
KUEUE_GATED_BY = "kueue.x-k8s.io/admission-gated-by"
KUEUE_GATE = "gpu-portal/approval"
DURATION = "gpu-portal.io/duration-hours"
REASON = "gpu-portal.io/reason"
MAX_VGPUS, MAX_MEMORY_MIB, MAX_HOURS = 64, 16 * 1024 * 1024, 24 * 366
POD, JOB = "Pod", "Job"
API_VERSIONS = {POD: "v1", JOB: "batch/v1"}


class Refused(Exception):
    """A workload the portal asks nothing for: the message says why, to the log and to it."""


def kind_of(obj: dict) -> str:
    return JOB if obj.get("kind") == JOB else POD


def path_of(kind: str, namespace: str, name: str = "") -> str:
    """The API path of the kind's collection in a namespace, or of one object in it."""
    base = "/api/v1" if kind == POD else "/apis/batch/v1"
    plural = "pods" if kind == POD else "jobs"
    return f"{base}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def annotations(obj: dict) -> dict:
    return _dict(_dict(obj.get("metadata")).get("annotations"))


def pod_spec(obj: dict) -> dict:
    """The Pod's spec, or the spec of the Pods a Job makes."""
    spec = _dict(obj.get("spec"))
    return _dict(_dict(spec.get("template")).get("spec")) if kind_of(obj) == JOB else spec


def _gates(obj: dict) -> list:
    gates = pod_spec(obj).get("schedulingGates") or []
    return gates if isinstance(gates, list) else []


def kueue_gaters(obj: dict) -> list[str]:
    value = annotations(obj).get(KUEUE_GATED_BY)
    if not isinstance(value, str):
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def is_gated(obj: dict, kueue: bool) -> bool:
    """Whether the workload waits for the portal: Kueue's annotation under Kueue, the
    scheduling gate (the Pod's, or the Job's pod template's) without it."""
    if kueue:
        return KUEUE_GATE in kueue_gaters(obj)
    return any(isinstance(g, dict) and g.get("name") == GATE for g in _gates(obj))


def job_of(pod: dict) -> str | None:
    """The uid of the batch/v1 Job controlling this Pod, if one does (a Volcano or other
    "Job" is not one: its Pods are workloads of their own)."""
    owners = _dict(pod.get("metadata")).get("ownerReferences") or []
    for owner in owners if isinstance(owners, list) else []:
        if (
            isinstance(owner, dict) and owner.get("kind") == JOB
            and owner.get("apiVersion") == API_VERSIONS[JOB] and owner.get("controller")
        ):  # fmt: skip
            uid = owner.get("uid")
            return uid[:64] if isinstance(uid, str) else None
    return None


def paused(obj: dict) -> bool:
    """A Job scaled to no Pods (``parallelism: 0``): nothing to ask for until it grows."""
    return kind_of(obj) == JOB and _dict(obj.get("spec")).get("parallelism") == 0


def made_from(pod: dict, job: dict) -> bool:
    """Whether the Pod asks what its Job's template asks (the same HAMi limits, requests
    where no limit, and the same claims): a Pod naming the Job as its owner but asking for
    more is not ungated on the Job's request."""

    def asks(spec: dict) -> tuple:
        containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
        limits = []
        for container in containers:
            limits.append(sorted((k, str(v)) for k, v in _asked(container).items()
                                 if k in (HAMI_GPU, HAMI_MEMORY, HAMI_CORES)))  # fmt: skip
        claims = spec.get("resourceClaims") or []
        return sorted(map(str, limits)), sorted(
            map(str, claims if isinstance(claims, list) else [])
        )

    return asks(_dict(pod.get("spec"))) == asks(pod_spec(job))


def parallel_pods(job: dict) -> int:
    """How many Pods of the Job may hold its request's GPUs at once (0 when unreadable)."""
    try:
        return _parallel_pods(job)
    except Refused:
        return 0


def finished(obj: dict) -> bool:
    """A Pod that succeeded or failed, a Job complete or failed: its GPUs are free again."""
    status = _dict(obj.get("status"))
    if kind_of(obj) == POD:
        return status.get("phase") in ("Succeeded", "Failed")
    conditions = status.get("conditions") or []
    return any(
        isinstance(c, dict)
        and c.get("type") in ("Complete", "Failed")
        and c.get("status") == "True"
        for c in (conditions if isinstance(conditions, list) else [])
    )


_INTEGER = re.compile(r"^[0-9]{1,9}$")


def whole(value, what: str, low: int, high: int) -> int:
    """A plain integer quantity within bounds: HAMi's resources are counts, MiB and %, never
    '1Gi' or '0.5'; anything else is refused rather than guessed."""
    text = (
        str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    )
    if not _INTEGER.match(text) or not low <= int(text) <= high:
        raise Refused(
            _("%(what)s must be a whole number from %(low)s to %(high)s, not %(value)s.")
            % {"what": what, "low": low, "high": high, "value": repr(value)[:40]}
        )
    return int(text)


@dataclass(frozen=True)
class Size:
    count: int
    compute_pct: int
    memory_mib: int
    whole_card: bool


def _parallel_pods(job: dict) -> int:
    """How many of the Job's Pods run at once: ``parallelism`` (default 1), no more than
    ``completions`` when that is set."""
    spec = _dict(job.get("spec"))
    parallel = whole(spec.get("parallelism", 1), "parallelism", 1, MAX_VGPUS)
    if spec.get("completions") is not None:
        parallel = min(parallel, whole(spec["completions"], "completions", 1, 10**9 - 1))
    return parallel


# The key a standalone ResourceClaim's spec is given under among the templates read (no
# object name holds a '/').
CLAIM_KEY = "resourceclaim/"


def claim_templates(obj: dict) -> list[str]:
    """The ResourceClaimTemplates the workload's Pods claim devices through, by name, and
    a Pod's standalone ResourceClaims (``resourceClaimName``) as ``CLAIM_KEY + name``."""
    claims = pod_spec(obj).get("resourceClaims") or []
    claims = [c for c in claims if isinstance(c, dict)] if isinstance(claims, list) else []
    names = [c.get("resourceClaimTemplateName") for c in claims]
    if kind_of(obj) == POD:
        names += [CLAIM_KEY + n for n in (c.get("resourceClaimName") for c in claims)
                  if isinstance(n, str) and n]  # fmt: skip
    return [n for n in names if isinstance(n, str) and n]


def _quantity_mib(value, what: str) -> int:
    """A DRA memory quantity ('8Gi', '8192Mi', bytes) as whole MiB within bounds."""
    try:
        mib = parse_quantity(value) / Decimal(1024 * 1024) if isinstance(value, str | int) else None
    except (ValueError, InvalidOperation):
        mib = None
    if mib is None or mib != mib.to_integral_value() or not 1 <= mib <= MAX_MEMORY_MIB:
        raise Refused(
            _("%(what)s must be a whole number of MiB from 1 MiB to 16 TiB, not %(value)s.")
            % {"what": what, "value": repr(value)[:40]}
        )
    return int(mib)


def _claim_spec(claim: dict, templates: Mapping[str, dict | None], kind: str) -> dict:
    """The claim's ``spec`` (a template's ``spec.spec``, a standalone claim's ``spec``): a
    Pod may name a claim of its own, which no other consumer holds; a Job's Pods would all
    share it, so a Job claims through templates only."""
    name = claim.get("resourceClaimTemplateName")
    standalone = claim.get("resourceClaimName")
    if isinstance(name, str) and name:
        template = templates.get(name)
        if template is None:
            raise Refused(_("ResourceClaimTemplate %(name)s not found.") % {"name": name[:63]})
        return _dict(_dict(template.get("spec")).get("spec"))
    if kind != POD or not isinstance(standalone, str) or not standalone:
        raise Refused(_("Claim devices through a ResourceClaimTemplate, not a shared "
                        "ResourceClaim: a shared claim cannot be sized per Pod."))  # fmt: skip
    found = templates.get(CLAIM_KEY + standalone)
    if found is None:
        raise Refused(_("ResourceClaim %(name)s not found.") % {"name": standalone[:63]})
    if _dict(found.get("status")).get("reservedFor"):
        raise Refused(_("ResourceClaim %(name)s is in use by another consumer: a shared claim "
                        "cannot be sized per Pod.") % {"name": standalone[:63]})  # fmt: skip
    return _dict(found.get("spec"))


def _claimed(
    spec: dict, templates: Mapping[str, dict | None], device_class: str, kind: str = POD
) -> tuple[int, int, int]:
    """(devices, memory MiB, cores %) the Pod's claims ask of the device class: devices
    summed over the requests, memory and cores the largest any request asks."""
    count, memory, cores = 0, 0, 0
    for claim in spec.get("resourceClaims") or []:
        if not isinstance(claim, dict):
            continue
        devices = _dict(_claim_spec(claim, templates, kind).get("devices"))
        for request in devices.get("requests") or []:
            exactly = _dict(_dict(request).get("exactly"))
            if exactly.get("deviceClassName") != device_class:
                continue
            if exactly.get("allocationMode", "ExactCount") != "ExactCount":
                raise Refused(_("Ask for an exact count of devices, not all of them."))
            count += whole(exactly.get("count", 1), "count", 1, MAX_VGPUS)
            asks = _dict(_dict(exactly.get("capacity")).get("requests"))
            if "memory" in asks:
                memory = max(memory, _quantity_mib(asks["memory"], "capacity memory"))
            if "cores" in asks:
                cores = max(cores, whole(asks["cores"], "capacity cores", 1, 100))
    return count, memory, cores


def _asked(container) -> dict:
    """A container's resources as the scheduler reads them: its limits, or its requests
    where it gives no limit."""
    resources = _dict(_dict(container).get("resources"))
    return {**_dict(resources.get("requests")), **_dict(resources.get("limits"))}


def _limits(containers: list) -> tuple[int, int, int]:
    """(vGPUs, memory MiB, cores %) of HAMi's limits: vGPUs summed over the containers,
    memory and cores the largest any container asks."""
    count, memory, cores = 0, 0, 0
    for container in containers:
        merged = _asked(container)
        if HAMI_GPU not in merged:
            continue
        count += whole(merged[HAMI_GPU], HAMI_GPU, 1, MAX_VGPUS)
        if HAMI_MEMORY in merged:
            memory = max(memory, whole(merged[HAMI_MEMORY], HAMI_MEMORY, 1, MAX_MEMORY_MIB))
        if HAMI_CORES in merged:
            cores = max(cores, whole(merged[HAMI_CORES], HAMI_CORES, 1, 100))
    if not count:
        raise Refused(_("No container asks for %(gpu)s.") % {"gpu": HAMI_GPU})
    return count, memory, cores


def size_of(
    obj: dict, templates: Mapping[str, dict | None] | None = None, device_class: str = ""
) -> Size:
    """The request a workload asks for, from its containers' HAMi limits (requests where a
    limit is missing), or on a DRA cluster (``device_class``) from the claim templates its
    Pods use (``templates``, by name): vGPUs summed (for a Job, times the Pods it runs at
    once), memory (MiB) and cores (%) per vGPU the largest asked; neither is a whole card."""
    spec = pod_spec(obj)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise Refused(_("The Pod has no containers."))
    if device_class and spec.get("resourceClaims"):
        count, memory, cores = _claimed(spec, templates or {}, device_class, kind_of(obj))
        if not count:
            raise Refused(_("No claim asks for a device of class %(cls)s.") % {"cls": device_class})
    else:
        count, memory, cores = _limits(containers)
    if kind_of(obj) == JOB:
        count *= _parallel_pods(obj)
    if count > MAX_VGPUS:
        raise Refused(
            _("%(count)s vGPUs asked: at most %(max)s.") % {"count": count, "max": MAX_VGPUS}
        )
    if cores and not memory:
        # HAMi gives such a container the whole card's memory: the ask cannot be sized.
        raise Refused(
            _("Give %(memory)s with %(cores)s: without it HAMi gives the whole card's memory.")
            % {"memory": HAMI_MEMORY, "cores": HAMI_CORES}
        )
    return Size(count, cores or 100, memory or 1024, not memory and not cores)


def ask(obj: dict, size: Size) -> dict:
    """The request's fields for a workload of this size, from its annotations."""
    notes = annotations(obj)
    hours = None
    if DURATION in notes:
        hours = whole(notes[DURATION], DURATION, 1, MAX_HOURS)
    meta = obj["metadata"]
    reason = notes.get(REASON)
    if not isinstance(reason, str) or not reason.strip():
        reason = _("Kubernetes %(kind)s %(namespace)s/%(name)s") % {
            "kind": kind_of(obj), "namespace": meta["namespace"], "name": meta["name"]}  # fmt: skip
    return {"count": size.count, "whole_card": size.whole_card, "compute_pct": size.compute_pct,
            "memory_mib": size.memory_mib, "duration_hours": hours,
            "reason": reason[:2000]}  # fmt: skip


def identity(obj: dict) -> tuple[str, str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Refused(_("The Pod has no metadata."))
    name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    if not all(isinstance(v, str) and 0 < len(v) <= 253 for v in (name, namespace, uid)):
        raise Refused(_("The Pod has no name, namespace or uid."))
    return name, namespace, uid[:64]


def removal(obj: dict, kueue: bool) -> list[dict] | None:
    """The JSON patch taking exactly the portal's gate off the object, None when it is gone
    already. The resourceVersion read makes it conditional (409 when the object changed),
    and a test of the entry keeps it from removing another's gate at the same index. (A
    Job's own template is never patched: its Pods are, one by one.)"""
    version = [{"op": "test", "path": "/metadata/resourceVersion",
                "value": obj["metadata"]["resourceVersion"]}]  # fmt: skip
    if kueue:
        gaters = kueue_gaters(obj)
        if KUEUE_GATE not in gaters:
            return None
        path = "/metadata/annotations/" + KUEUE_GATED_BY.replace("~", "~0").replace("/", "~1")
        rest = [g for g in gaters if g != KUEUE_GATE]
        if rest:
            return [*version, {"op": "replace", "path": path, "value": ",".join(rest)}]
        return [*version, {"op": "remove", "path": path}]
    for i, gate in enumerate(_gates(obj) if kind_of(obj) == POD else []):
        if isinstance(gate, dict) and gate.get("name") == GATE:
            return [*version, {"op": "test", "path": f"/spec/schedulingGates/{i}", "value": gate},
                    {"op": "remove", "path": f"/spec/schedulingGates/{i}"}]  # fmt: skip
    return None
