"""Pod labels from the kubelet's pod-resources API, served by a real gRPC server here."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.kubelet import KubeletPodLabeller
from agents.gpu_agent.kubelet_api import podresources_pb2 as pb
from agents.gpu_agent.kubelet_api import podresources_pb2_grpc as pb_grpc
from agents.gpu_agent.model import GpuReading, MigDevice


class FakeKubelet(pb_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.pods: list[pb.PodResources] = []
        self.calls = 0

    def List(self, request: pb.ListPodResourcesRequest, context: Any) -> Any:  # gRPC's method name
        self.calls += 1
        return pb.ListPodResourcesResponse(pod_resources=self.pods)


def pod(name: str, namespace: str, container: str, *device_ids: str) -> pb.PodResources:
    devices = pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=list(device_ids))
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[pb.ContainerResources(name=container, devices=[devices])],
    )


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[FakeKubelet, Path]]:
    # Unix socket paths are limited to ~100 bytes; tmp_path can be longer.
    import tempfile

    socket_dir = Path(tempfile.mkdtemp(prefix="kubelet-"))
    socket_path = socket_dir / "kubelet.sock"
    servicer = FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    yield servicer, socket_path
    server.stop(0)
    socket_path.unlink(missing_ok=True)
    socket_dir.rmdir()


def test_cards_are_labelled_with_the_pods_that_hold_them(
    kubelet: tuple[FakeKubelet, Path],
) -> None:
    servicer, socket_path = kubelet
    servicer.pods = [
        pod("train-0", "ml", "trainer", "GPU-a"),
        pod("infer-1", "serving", "triton", "GPU-b::0"),  # time-sliced replica
        pod("infer-2", "serving", "triton", "GPU-b::1"),
        pod("mig-user", "ml", "nb", "MIG-c1"),
    ]
    gpus = [
        GpuReading(index=0, uuid="GPU-a"),
        GpuReading(index=1, uuid="GPU-b"),
        GpuReading(index=2, uuid="GPU-c", mig_devices=[MigDevice(index=0, uuid="MIG-c1")]),
        GpuReading(index=3, uuid="GPU-free"),
    ]
    labeller = KubeletPodLabeller(socket_path)
    labeller.label(gpus)
    labeller.close()
    assert [[(p.pod, p.namespace, p.container) for p in g.pods or ()] for g in gpus] == [
        [("train-0", "ml", "trainer")],
        [("infer-1", "serving", "triton"), ("infer-2", "serving", "triton")],
        [("mig-user", "ml", "nb")],
        [],
    ]
    assert gpus[3].pods is None


def test_the_kubelet_is_asked_again_only_after_the_refresh_period(
    kubelet: tuple[FakeKubelet, Path],
) -> None:
    servicer, socket_path = kubelet
    now = [100.0]
    labeller = KubeletPodLabeller(socket_path, refresh_s=10, clock=lambda: now[0])
    for _ in range(5):
        now[0] += 3  # 3, 6, 9, 12, 15 s: a fetch at 3 s and another at 15 s
        labeller.label([GpuReading(index=0, uuid="GPU-a")])
    labeller.close()
    assert servicer.calls == 2


def test_an_unreachable_kubelet_leaves_the_readings_unlabelled(tmp_path: Path) -> None:
    labeller = KubeletPodLabeller(tmp_path / "missing.sock")
    gpu = GpuReading(index=0, uuid="GPU-a")
    labeller.label([gpu])
    labeller.close()
    assert gpu.pods is None


def test_the_agent_labels_snapshot_and_metrics_with_pods(
    kubelet: tuple[FakeKubelet, Path], start_agent: Any, get: Any
) -> None:
    servicer, socket_path = kubelet
    uuids = [g.uuid for g in SimulatedBackend("k-01", 2, "NVIDIA L40S", seed=5).collect().gpus]
    servicer.pods = [pod("train-0", "ml", "trainer", uuids[1])]
    agent = start_agent(
        "--backend", "sim", "--gpus", "2", "--model", "NVIDIA L40S", "--seed", "5",
        "--hostname", "k-01", "--no-auth", "--kubelet-socket", str(socket_path),
    )  # fmt: skip
    gpus = get(f"{agent.urls[0]}/v1/snapshot").json()["gpus"]
    assert "pods" not in gpus[0]
    assert gpus[1]["pods"] == [{"pod": "train-0", "namespace": "ml", "container": "trainer"}]
    text = get(f"{agent.urls[0]}/metrics").body.decode()
    [util] = [f for f in text_string_to_metric_families(text) if f.name == "DCGM_FI_DEV_GPU_UTIL"]
    labelled = {s.labels["gpu"]: s.labels for s in util.samples}
    assert "pod" not in labelled["0"]
    assert (labelled["1"]["pod"], labelled["1"]["namespace"], labelled["1"]["container"]) == (
        "train-0", "ml", "trainer",
    )  # fmt: skip


def test_kubelet_socket_without_grpcio_is_a_clear_error(run_python: Any) -> None:
    code = (
        "import sys; sys.modules['grpc'] = None\n"
        "from agents.gpu_agent.cli import main\n"
        "sys.exit(main(['--backend', 'sim', '--no-auth', '--kubelet-socket', '/x.sock']))"
    )
    result = run_python("-c", code)
    assert result.returncode == 2
    assert "--kubelet-socket needs grpcio and protobuf" in result.stderr
