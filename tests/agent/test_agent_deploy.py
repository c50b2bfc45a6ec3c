"""The shipped systemd unit and DaemonSet start the agent with flags it accepts."""

from __future__ import annotations

import configparser
import shlex

import yaml

from agents.gpu_agent.cli import build_parser
from tests.agent.conftest import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"


def test_the_systemd_unit_runs_the_agent_with_valid_flags() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(DEPLOY / "systemd" / "gpu-agent.service")
    command = shlex.split(unit["Service"]["ExecStart"].replace("\\\n", " "))
    assert command[0].endswith("/gpu-agent")
    args = build_parser().parse_args(command[1:])
    assert args.backend == "nvml"
    assert args.listen == ("0.0.0.0", 9400)  # noqa: S104 (a node agent serves the network)
    assert str(args.state_dir) == "${STATE_DIRECTORY}"  # systemd expands it
    assert unit["Service"]["StateDirectory"] == "gpu-agent"
    assert unit["Service"]["EnvironmentFile"] == "/etc/gpu-agent/env"


def test_the_daemonset_runs_the_agent_with_valid_flags_and_the_kubelet_socket() -> None:
    manifest = yaml.safe_load((DEPLOY / "kubernetes" / "gpu-agent-daemonset.yaml").read_text())
    assert manifest["kind"] == "DaemonSet"
    pod = manifest["spec"]["template"]["spec"]
    assert pod["hostPID"] is True  # process owners and environments come from /proc
    [container] = pod["containers"]
    args = build_parser().parse_args(["--hostname", "node-1", *container["args"]])
    assert str(args.kubelet_socket) == "/var/lib/kubelet/pod-resources/kubelet.sock"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(args.kubelet_socket.parent) in mounts
    assert str(args.state_dir) in mounts
    token = next(e for e in container["env"] if e["name"] == "GPU_AGENT_TOKEN")
    assert "secretKeyRef" in token["valueFrom"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
