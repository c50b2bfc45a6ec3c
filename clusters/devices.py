"""Which cards the cluster gave a workload, read from its objects alone (plain dicts as the
API answers them; no calls, no database), and how the portal's books follow.

HAMi's scheduler writes its choice on the Pod: ``hami.io/vgpu-node`` (the node),
``hami.io/bind-phase`` (``allocating``, ``failed``, ``success``: the device plugin has
allocated them) and ``hami.io/vgpu-devices-allocated``, one entry per container ended by
``;``, each a list of devices ended by ``:``, a device ``uuid,type,memory MiB,cores %``
(``GPU-0fc3...,NVIDIA,3000,25:;``; a container without GPUs is an empty entry).

With DRA the scheduler writes a ResourceClaim's ``status.allocation.devices.results``
(driver, pool, device) and the Pod's ``spec.nodeName``; a device is a card through the
ResourceSlice of that driver and pool, whose device carries the attribute ``uuid``.

Every reader is strict and bounded: anything else is ``Refused``, alone.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from django.utils.translation import gettext as _

from clusters.workloads import MAX_MEMORY_MIB, MAX_VGPUS, Refused, annotations, whole

HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_NODE = "hami.io/vgpu-node"
HAMI_PHASE = "hami.io/bind-phase"
HAMI_BOUND = "success"
MAX_ANNOTATION = 8192  # 64 devices of a 40-character uuid fit in a fifth of it
MAX_CLAIMS = 16  # claims read per Pod
MAX_SLICE_DEVICES = 20000  # devices indexed from a cluster's ResourceSlices
CARD_UUID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEVICE_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")
# A DNS subdomain (node, driver, pool names) and a DNS label (a device's name).
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the cluster runs a workload: its node(s) and one card uuid per vGPU."""

    nodes: tuple[str, ...]
    uuids: tuple[str, ...]


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value, what: str, most: int) -> list:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > most:
        raise Refused(_("%(what)s is not a list of at most %(most)s entries.")
                      % {"what": what, "most": most})  # fmt: skip
    return value


def _name(value, pattern: re.Pattern, what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise Refused(_("%(what)s %(value)s is not a valid name.")
                      % {"what": what, "value": repr(value)[:70]})  # fmt: skip
    return value


def _node(pod: dict) -> str:
    node = _dict(pod.get("spec")).get("nodeName")
    return _name(node, SUBDOMAIN, "nodeName") if node else ""


def hami_placement(pod: dict) -> Placement | None:
    """The cards HAMi gave the Pod, once its device plugin allocated them (bind phase
    ``success``); None before that."""
    notes = annotations(pod)
    if notes.get(HAMI_PHASE) != HAMI_BOUND:
        return None
    value = notes.get(HAMI_ALLOCATED)
    if not isinstance(value, str) or not value or len(value) > MAX_ANNOTATION:
        raise Refused(_("%(name)s is missing, not text or longer than %(most)s characters.")
                      % {"name": HAMI_ALLOCATED, "most": MAX_ANNOTATION})  # fmt: skip
    if not value.endswith(";"):
        raise Refused(_("%(name)s does not end with ';'.") % {"name": HAMI_ALLOCATED})
    uuids: list[str] = []
    for container in value[:-1].split(";"):
        if container and not container.endswith(":"):
            raise Refused(_("%(name)s: a container's devices do not end with ':'.")
                          % {"name": HAMI_ALLOCATED})  # fmt: skip
        for device in container[:-1].split(":") if container else []:
            parts = device.split(",")
            if not 4 <= len(parts) <= 8:
                raise Refused(_("%(name)s: %(device)s is not uuid,type,memory,cores.")
                              % {"name": HAMI_ALLOCATED, "device": device[:80]})  # fmt: skip
            uuid = _name(parts[0], CARD_UUID, _("card uuid"))
            _name(parts[1], DEVICE_TYPE, _("device type"))
            whole(parts[2], _("device memory"), 0, MAX_MEMORY_MIB)
            whole(parts[3], _("device cores"), 0, 100)
            uuids.append(uuid)
            if len(uuids) > MAX_VGPUS:
                raise Refused(_("More than %(most)s devices.") % {"most": MAX_VGPUS})
    if not uuids:
        raise Refused(_("%(name)s names no device.") % {"name": HAMI_ALLOCATED})
    node = notes.get(HAMI_NODE) or _node(pod)
    return Placement((_name(node, SUBDOMAIN, HAMI_NODE),), tuple(uuids))


def claim_names(pod: dict) -> list[str]:
    """The ResourceClaims the Pod uses: those its spec names (``resourceClaimName``) and
    those made for it from a template (``status.resourceClaimStatuses``)."""
    names = [c.get("resourceClaimName") for c in
             _list(_dict(pod.get("spec")).get("resourceClaims"), "resourceClaims", MAX_CLAIMS)
             if isinstance(c, dict)]  # fmt: skip
    made = _list(_dict(pod.get("status")).get("resourceClaimStatuses"),
                 "resourceClaimStatuses", MAX_CLAIMS)  # fmt: skip
    names += [s.get("resourceClaimName") for s in made if isinstance(s, dict)]
    return [_name(n, SUBDOMAIN, "ResourceClaim") for n in dict.fromkeys(names) if n is not None]


def standalone_claims(obj: dict) -> list[str]:
    """The claims a Pod names itself (``resourceClaimName``): not the Pod's own, so they
    outlive it unless deleted. Names that are not names are left out."""
    claims = _dict(obj.get("spec")).get("resourceClaims")
    names = [c.get("resourceClaimName") for c in claims if isinstance(c, dict)] if isinstance(
        claims, list) else []  # fmt: skip
    return [n for n in names[:MAX_CLAIMS] if isinstance(n, str) and SUBDOMAIN.match(n)]


def _class_requests(claim: dict, device_class: str) -> set[str]:
    """The claim's requests asking for the device class (others may be NICs...)."""
    devices = _dict(_dict(claim.get("spec")).get("devices"))
    found = set()
    for request in _list(devices.get("requests"), "requests", 32):
        request = _dict(request)
        if _dict(request.get("exactly")).get("deviceClassName") == device_class:
            found.add(request.get("name"))
        for sub in _list(request.get("firstAvailable"), "firstAvailable", 8):
            if _dict(sub).get("deviceClassName") == device_class:
                found.add(request.get("name"))
    return found


def claim_devices(claim: dict, device_class: str) -> list[tuple[str, str, str]] | None:
    """(driver, pool, device) of each device of the class the claim was allocated; None
    while it is not allocated."""
    allocation = _dict(claim.get("status")).get("allocation")
    if not allocation:
        return None
    wanted = _class_requests(claim, device_class)
    results = _list(_dict(_dict(allocation).get("devices")).get("results"), "results", MAX_VGPUS)
    found = []
    for result in results:
        result = _dict(result)
        request = result.get("request")
        if not isinstance(request, str) or request.split("/")[0] not in wanted:
            continue
        found.append((_name(result.get("driver"), SUBDOMAIN, _("driver")),
                      _name(result.get("pool"), SUBDOMAIN, _("pool")),
                      _name(result.get("device"), LABEL, _("device"))))  # fmt: skip
    return found


def slice_uuids(slices: Iterable[dict]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> card uuid over the cluster's ResourceSlices. A slice or
    device that cannot be read is left out (its devices are then in no slice)."""
    index: dict[tuple[str, str, str], str] = {}
    for obj in slices:
        spec = _dict(_dict(obj).get("spec"))
        driver, pool = spec.get("driver"), _dict(spec.get("pool")).get("name")
        devices = spec.get("devices")
        if not (isinstance(driver, str) and isinstance(pool, str) and isinstance(devices, list)):
            continue
        for device in devices[:128]:  # the API's own limit per slice
            device = _dict(device)
            attrs = _dict(device.get("attributes"))
            uuid = _dict(attrs.get("uuid") or attrs.get(f"{driver}/uuid")).get("string")
            name = device.get("name")
            if isinstance(name, str) and isinstance(uuid, str) and CARD_UUID.match(uuid):
                index[(driver, pool, name)] = uuid
            if len(index) >= MAX_SLICE_DEVICES:
                return index
    return index


def dra_placement(
    pod: dict,
    claims: Mapping[str, dict],
    index: Mapping[tuple[str, str, str], str],
    device_class: str,
) -> Placement | None:
    """The cards the Pod's claims were allocated (``claims``: the namespace's, by name),
    once it is bound to a node; None before that."""
    node = _node(pod)
    if not node:
        return None
    uuids = []
    for name in claim_names(pod):
        claim = claims.get(name)
        if claim is None:
            return None  # not made yet, or not listed: the next pass
        devices = claim_devices(claim, device_class)
        if devices is None:
            return None
        for driver, pool, device in devices:
            uuid = index.get((driver, pool, device))
            if uuid is None:
                raise Refused(_("Device %(device)s of %(driver)s pool %(pool)s is in no "
                                "ResourceSlice.") % {"device": device, "driver": driver,
                                                     "pool": pool[:63]})  # fmt: skip
            uuids.append(uuid)
    if len(uuids) > MAX_VGPUS:
        raise Refused(_("More than %(most)s devices.") % {"most": MAX_VGPUS})
    return Placement((node,), tuple(uuids)) if uuids else None


@dataclass(frozen=True, slots=True)
class Plan:
    """How the request's allocations follow the cluster: the moves (allocation id, card
    uuid), the uuids the pool has no card for, the vGPUs run beyond those held, and the
    cards given several of its vGPUs (the portal puts each vGPU of a request on a card of
    its own)."""

    moves: tuple[tuple[int, str], ...]
    unknown: tuple[str, ...]
    extra: int
    doubled: tuple[str, ...] = ()


def plan(held: Sequence[tuple[int, str | None]], chosen: Sequence[str],
         known: Collection[str]) -> Plan:  # fmt: skip
    """``held``: the request's active allocations (id, its card's uuid); ``chosen``: the
    cluster's cards; ``known``: uuids of the pool's cards. An allocation already on a
    chosen card stays; the others move, in order, to the chosen cards left."""
    distinct = list(dict.fromkeys(chosen))
    doubled = tuple(u for u in distinct if chosen.count(u) > 1)
    left = list(distinct)
    free = []
    for allocation_id, uuid in held:
        if uuid in left:
            left.remove(uuid)
        else:
            free.append(allocation_id)
    moves, unknown, extra = [], [], 0
    for uuid in left:
        if uuid not in known:
            unknown.append(uuid)
        elif free:
            moves.append((free.pop(0), uuid))
        else:
            extra += 1
    return Plan(tuple(moves), tuple(unknown), extra, doubled)
