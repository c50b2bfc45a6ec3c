"""The Job the portal writes for a caller (``gpuctl run --cluster``; docs/kubernetes.md,
"Jobs made by the portal"): plain dicts, no I/O.

What the caller chooses is small and checked here: an image reference, a command and its
arguments, a few environment variables, and the size (vGPUs, compute %, memory MiB, hours).
Everything else is the portal's: one container that may not escalate privileges, no
volumes (no hostPath), the namespace's default service account without its token, restart
policy Never and no retries, the portal's gate (the Pod scheduling gate, or Kueue's
``admission-gated-by`` entry with the namespace's LocalQueue), and HAMi's limits or, on a
DRA cluster, a ResourceClaimTemplate of the cluster's device class. The Job is sized by the
same readers the gate pass uses (clusters.workloads), so what is written is what is asked.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from django.utils.translation import gettext as _

from clusters.choices import DEVICE_CLASSES, NVIDIA_DEVICE_CLASS
from clusters.render import HAMI_CORES, HAMI_GPU, HAMI_MEMORY, MANAGED_BY, MANAGER, dns_name
from clusters.workloads import (
    DURATION,
    GATE,
    KUEUE_GATE,
    KUEUE_GATED_BY,
    MAX_HOURS,
    MAX_MEMORY_MIB,
    MAX_VGPUS,
    REASON,
)

CREATED_FOR = "gpu-portal.io/created-for"  # annotation: the portal user, as they sign in
USER_ID = "gpu-portal.io/user-id"  # label: the same user's id, for selectors
QUEUE_NAME = "kueue.x-k8s.io/queue-name"
CLAIM = "gpu"
# A finished Job is kept this long (the Job's own TTL), so its outcome can be read.
FINISHED_TTL_S = 24 * 3600

MAX_IMAGE = 512
MAX_ARGS, MAX_ARG = 64, 4096
MAX_ENV, MAX_ENV_NAME, MAX_ENV_VALUE = 32, 128, 4096
MAX_TOTAL = 64 * 1024  # bytes of command, args and env together

# A container image reference, as distribution/reference parses one: an optional registry
# (host[:port]/), lower-case path components, then a tag and/or a sha256-style digest.
_HOST = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE = re.compile(
    rf"^(?:{_HOST}(?::[0-9]{{1,5}})?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What the enforcement sets itself and a job must not override: HAMi's and MPS's limits,
# the driver's memory cap, which cards are seen, the portal's own variables, the loader.
RESERVED_ENV = ("CUDA_DEVICE_", "CUDA_MPS_", "CUDA_VISIBLE_DEVICES", "NVIDIA_", "HAMI_",
                "GPU_PORTAL_", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT")  # fmt: skip


class Invalid(Exception):
    """Bad input: ``errors`` maps each field to its messages."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class JobAsk:
    """What the caller asks: checked by ``check`` before anything is written."""

    namespace: str
    image: str
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    gpus: int = 1
    compute_pct: int | None = None
    memory_mib: int | None = None
    duration_hours: int | None = None
    reason: str = ""


def _strings(value: list[str], what: str, errors: dict[str, list[str]]) -> None:
    if len(value) > MAX_ARGS:
        errors.setdefault(what, []).append(_("At most %(n)s items.") % {"n": MAX_ARGS})
    for item in value:
        if len(item) > MAX_ARG or "\x00" in item:
            errors.setdefault(what, []).append(
                _("Each item has at most %(n)s characters and no NUL.") % {"n": MAX_ARG}
            )
            break


def check(ask: JobAsk, enforcement: str) -> None:
    """Raise Invalid naming each field that is wrong; nothing is written before this."""
    errors: dict[str, list[str]] = {}
    if len(ask.image) > MAX_IMAGE or not IMAGE.match(ask.image):
        errors["image"] = [_("Not an image reference (e.g. registry.example.com/team/train:1.2 "
                             "or pytorch/pytorch@sha256:...).")]  # fmt: skip
    if not ask.command and not ask.args:
        errors["command"] = [_("Give a command (or arguments for the image's entrypoint).")]
    _strings(ask.command, "command", errors)
    _strings(ask.args, "args", errors)
    if len(ask.env) > MAX_ENV:
        errors.setdefault("env", []).append(_("At most %(n)s variables.") % {"n": MAX_ENV})
    for name, value in ask.env.items():
        if len(name) > MAX_ENV_NAME or not ENV_NAME.match(name):
            errors.setdefault("env", []).append(
                _("%(name)s: a name is letters, digits and '_', not starting with a digit.")
                % {"name": name[:40]}
            )
        elif name.upper().startswith(RESERVED_ENV):
            errors.setdefault("env", []).append(
                _("%(name)s is set by the GPU enforcement and may not be given.") % {"name": name}
            )
        if len(value) > MAX_ENV_VALUE or "\x00" in value:
            errors.setdefault("env", []).append(
                _("%(name)s: a value has at most %(n)s characters and no NUL.")
                % {"name": name[:40], "n": MAX_ENV_VALUE}
            )
    total = sum(map(len, ask.command + ask.args)) + sum(len(k) + len(v) for k, v in ask.env.items())
    if total > MAX_TOTAL:
        errors.setdefault("command", []).append(
            _("Command, arguments and environment hold at most %(n)s characters together.")
            % {"n": MAX_TOTAL}
        )
    if not 1 <= ask.gpus <= MAX_VGPUS:
        errors["gpus"] = [_("From 1 to %(n)s.") % {"n": MAX_VGPUS}]
    if ask.compute_pct is not None and not 1 <= ask.compute_pct <= 100:
        errors["compute_pct"] = [_("From 1 to 100.")]
    if ask.memory_mib is not None and not 1 <= ask.memory_mib <= MAX_MEMORY_MIB:
        errors["memory_mib"] = [_("From 1 MiB to 16 TiB.")]
    if ask.compute_pct is not None and ask.memory_mib is None:
        # HAMi then gives the whole card's memory, which the portal cannot size.
        errors.setdefault("memory_mib", []).append(_("Give the memory with the compute share."))
    if ask.compute_pct is not None and DEVICE_CLASSES.get(enforcement) == NVIDIA_DEVICE_CLASS:
        errors.setdefault("compute_pct", []).append(
            _("NVIDIA's DRA driver shares a card's memory only: leave the compute share out.")
        )
    if ask.duration_hours is not None and not 1 <= ask.duration_hours <= MAX_HOURS:
        errors["duration_hours"] = [_("From 1 to %(n)s hours.") % {"n": MAX_HOURS}]
    if len(ask.reason) > 2000:
        errors["reason"] = [_("At most 2000 characters.")]
    if errors:
        raise Invalid(errors)


def job_name(username: str) -> str:
    """A fresh name: ``gpuctl-<user>-<10 hex>``, an RFC 1123 label of at most 63."""
    return f"{dns_name('gpuctl', username)[:40].rstrip('-')}-{secrets.token_hex(5)}"


def _limits(ask: JobAsk) -> dict[str, str]:
    limits = {HAMI_GPU: str(ask.gpus)}
    if ask.memory_mib is not None:
        limits[HAMI_MEMORY] = str(ask.memory_mib)
    if ask.compute_pct is not None:
        limits[HAMI_CORES] = str(ask.compute_pct)
    return limits


def claim_template(ask: JobAsk, name: str, device_class: str) -> dict:
    """The ResourceClaimTemplate of a DRA cluster's Job: ``gpus`` devices of the class, each
    with the memory and cores asked (none: whole devices)."""
    exactly: dict = {"deviceClassName": device_class, "allocationMode": "ExactCount",
                     "count": ask.gpus}  # fmt: skip
    capacity = {}
    if ask.memory_mib is not None:
        capacity["memory"] = f"{ask.memory_mib}Mi"
    if ask.compute_pct is not None:
        capacity["cores"] = str(ask.compute_pct)
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ask.namespace,
                     "labels": {MANAGED_BY: MANAGER}},
        "spec": {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": exactly}]}}},
    }  # fmt: skip


def job(ask: JobAsk, *, name: str, user_id: int, username: str, enforcement: str,
        kueue: bool, queue: str = "") -> dict:  # fmt: skip
    """The batch/v1 Job for the ask, gated the cluster's way (``queue``: the namespace's
    LocalQueue, under Kueue)."""
    container: dict = {
        "name": "main", "image": ask.image,
        # Not runAsNonRoot: many images run as root (docs/kubernetes.md).
        "securityContext": {
            "privileged": False, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        },
    }  # fmt: skip
    if ask.command:
        container["command"] = list(ask.command)
    if ask.args:
        container["args"] = list(ask.args)
    if ask.env:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(ask.env.items())]
    pod: dict = {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "enableServiceLinks": False, "containers": [container]}  # fmt: skip
    device_class = DEVICE_CLASSES.get(enforcement)
    if device_class:
        pod["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": name}]
        container["resources"] = {"claims": [{"name": CLAIM}]}
    else:
        container["resources"] = {"limits": _limits(ask)}
    labels = {MANAGED_BY: MANAGER, USER_ID: str(user_id)}
    notes = {CREATED_FOR: username[:253]}
    if ask.duration_hours is not None:
        notes[DURATION] = str(ask.duration_hours)
    if ask.reason.strip():
        notes[REASON] = ask.reason.strip()
    spec: dict = {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                  "ttlSecondsAfterFinished": FINISHED_TTL_S,
                  "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}  # fmt: skip
    if kueue:
        notes[KUEUE_GATED_BY] = KUEUE_GATE
        labels[QUEUE_NAME] = queue
        spec["suspend"] = True  # as Kueue's webhook would make it: Kueue starts it
    else:
        pod["schedulingGates"] = [{"name": GATE}]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ask.namespace, "labels": labels,
                     "annotations": notes},
        "spec": spec,
    }  # fmt: skip


def outcome(obj: dict | None) -> str:
    """What became of a Job as its status says: ``gone`` (not found), ``succeeded``,
    ``failed``, ``running`` (a Pod active) or ``waiting``."""
    if obj is None:
        return "gone"
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("status") == "True":
            if condition.get("type") == "Complete":
                return "succeeded"
            if condition.get("type") == "Failed":
                return "failed"
    active = status.get("active")
    return "running" if isinstance(active, int) and active > 0 else "waiting"
