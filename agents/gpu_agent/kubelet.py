"""Which Kubernetes pod holds which GPU, from the kubelet's pod-resources API.

As dcgm-exporter does: ask the kubelet (gRPC on its unix socket) which containers
were given which device ids, and label the readings with pod, namespace and
container. NVIDIA's device plugin hands out GPU UUIDs, MIG UUIDs, or, with
time-slicing, ``<uuid>::<replica>``; all three are matched to their card.

Importing this module needs grpcio and protobuf, so the CLI imports it only for
``--kubelet-socket``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from agents.gpu_agent.kubelet_api import podresources_pb2 as pb
from agents.gpu_agent.kubelet_api import podresources_pb2_grpc as pb_grpc
from agents.gpu_agent.model import GpuReading, PodRef

log = logging.getLogger(__name__)

# Pods change on the scale of seconds to hours; asking every 10 s keeps the labels fresh
# without a gRPC round trip in every one-second collection.
REFRESH_S = 10.0
TIMEOUT_S = 2.0


def _card_id(device_id: str) -> str:
    # Time-sliced replicas: "GPU-...::3" is replica 3 of card "GPU-...".
    return device_id.split("::", 1)[0]


def pods_by_device(response: pb.ListPodResourcesResponse) -> dict[str, list[PodRef]]:
    """Device id (GPU or MIG UUID) -> containers holding it, in the kubelet's order."""
    out: dict[str, list[PodRef]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                for device_id in devices.device_ids:
                    ref = PodRef(pod=pod.name, namespace=pod.namespace, container=container.name)
                    holders = out.setdefault(_card_id(device_id), [])
                    if ref not in holders:
                        holders.append(ref)
    return out


class KubeletPodLabeller:
    def __init__(
        self,
        socket_path: Path,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket_path = socket_path
        self._refresh_s = refresh_s
        self._clock = clock
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._stub = pb_grpc.PodResourcesListerStub(self._channel)
        self._by_device: dict[str, list[PodRef]] = {}
        self._fetched_at: float | None = None
        self._failing = False

    def _refresh(self) -> None:
        now = self._clock()
        if self._fetched_at is not None and now - self._fetched_at < self._refresh_s:
            return
        self._fetched_at = now
        try:
            response = self._stub.List(pb.ListPodResourcesRequest(), timeout=TIMEOUT_S)
        except grpc.RpcError as exc:
            # Keep the last answer: a restarting kubelet does not move running pods.
            if not self._failing:
                log.warning("kubelet pod-resources at %s: %s", self.socket_path, exc)
            self._failing = True
            return
        if self._failing:
            log.info("kubelet pod-resources answering again")
        self._failing = False
        self._by_device = pods_by_device(response)

    def label(self, gpus: list[GpuReading]) -> None:
        self._refresh()
        for gpu in gpus:
            refs: list[PodRef] = []
            ids = [gpu.uuid] + [m.uuid for m in gpu.mig_devices or ()]
            for device_id in ids:
                for ref in self._by_device.get(device_id or "", ()):
                    if ref not in refs:
                        refs.append(ref)
            gpu.pods = refs or None

    def close(self) -> None:
        self._channel.close()
