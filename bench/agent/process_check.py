"""On a real GPU node: does the agent see, size and attribute real CUDA processes?

    python -m bench.agent.process_check --out DIR

Starts the real agent (NVML backend), gives it two slices through
``PUT /v1/desired-state``, then starts two PyTorch processes on card 0:

- ``job-env`` carries ``GPU_PORTAL_ALLOCATION=a-env`` and takes more memory than that
  slice allows (an ``over_memory`` violation is expected), running a matmul loop;
- ``job-stray`` carries nothing and runs as a user no slice names (``unallocated``).

Then a second desired state names this user as the owner of a third slice, and the
stray job must be attributed by owner. Each phase compares the agent's processes with
``nvidia-smi --query-compute-apps`` and its utilization with ``--query-gpu``, and writes
``process_check.json`` and a table to stdout. Needs the driver and PyTorch; imports
nothing from Django.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

TOKEN = "process-check-token"
PORT = 9411
RATIOS = ("gr_engine_active_ratio", "tensor_active_ratio", "dram_active_ratio")

JOB = r"""
import os, sys, time, torch
mib, seconds = int(sys.argv[1]), float(sys.argv[2])
hold = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
end = time.time() + seconds
print("ready", os.getpid(), flush=True)
while time.time() < end:
    for _ in range(50):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def agent_get(path: str) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 (our own http URL)
        return json.load(r)


def agent_put_desired(slices: list[dict]) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/desired-state",
        data=json.dumps({"slices": slices}).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 (our own http URL)
        return r.status


def smi(query: str, kind: str = "--query-compute-apps") -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", f"{kind}={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def phase(name: str, jobs: dict[str, int]) -> dict:
    """One look, agent and nvidia-smi back to back."""
    time.sleep(3)  # two collections with the jobs at work
    snap = agent_get("/v1/snapshot")
    apps = smi("pid,used_memory,process_name")
    util = smi("utilization.gpu,memory.used", kind="--query-gpu")
    gpu = snap["gpus"][0]
    procs = gpu.get("processes", [])
    by_pid = {str(p["pid"]): p for p in procs}
    rows = []
    for job, pid in jobs.items():
        p = by_pid.get(str(pid))
        s = next((a for a in apps if a[0] == str(pid)), None)
        rows.append(
            {
                "job": job,
                "pid": pid,
                "agent_seen": p is not None,
                "agent_memory_mib": p and p.get("memory_used_mib"),
                "smi_seen": s is not None,
                "smi_memory_mib": s and int(s[1]),
                "allocation_id": p and p.get("allocation_id"),
                "attributed_by": p and p.get("attributed_by"),
                "user": p and p.get("user"),
                "command": p and (p.get("command") or "")[:60],
            }
        )
    return {
        "phase": name,
        "jobs": rows,
        "agent_pids": sorted(str(p["pid"]) for p in procs),
        "smi_pids": sorted(a[0] for a in apps),
        "agent_util_pct": gpu.get("utilization_gpu_pct"),
        "smi_util_pct": util[0][0] if util else None,
        "agent_memory_used_mib": gpu.get("memory_used_mib"),
        "smi_memory_used_mib": util[0][1] if util else None,
        "ratios": {k: gpu[k] for k in RATIOS if k in gpu},
        "violations": snap.get("violations", []),
        "allocations": snap.get("allocations", []),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("process-check"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    logs = contextlib.ExitStack()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agents.gpu_agent",
            "--backend",
            "nvml",
            "--token",
            TOKEN,
            "--listen",
            f"127.0.0.1:{PORT}",
            "--interval",
            "1",
        ],
        stdout=logs.enter_context(open(args.out / "agent.out", "w")),  # noqa: SIM115
        stderr=logs.enter_context(open(args.out / "agent.err", "w")),  # noqa: SIM115
        env=env,
    )
    jobs: dict[str, subprocess.Popen] = {}
    result: dict = {"user": getpass.getuser()}
    try:
        for _ in range(40):
            try:
                snap = agent_get("/v1/snapshot")
                break
            except OSError:
                time.sleep(0.5)
        uuid = snap["gpus"][0]["uuid"]
        me = getpass.getuser()
        slice_env = {
            "allocation_id": "a-env",
            "gpu_uuid": uuid,
            "compute_pct": 30,
            "memory_mib": 1024,
            "owner": "someone-else",
        }
        result["put_1"] = agent_put_desired([slice_env])
        script = args.out / "job.py"
        script.write_text(JOB)
        specs = {
            "job-env": (3072, {"GPU_PORTAL_ALLOCATION": "a-env"}),
            "job-stray": (2048, {}),
        }
        for name, (mib, extra) in specs.items():
            jobs[name] = subprocess.Popen(
                [sys.executable, str(script), str(mib), "40"],
                env=dict(env, **extra),
                stdout=subprocess.PIPE,
                stderr=logs.enter_context(open(args.out / f"{name}.err", "w")),  # noqa: SIM115
                text=True,
            )
        for name, p in jobs.items():
            line = p.stdout.readline()
            print(name, line.strip(), flush=True)
        pids = {name: p.pid for name, p in jobs.items()}
        result["phases"] = [phase("env + stray", pids)]
        slice_owner = {
            "allocation_id": "a-owner",
            "gpu_uuid": uuid,
            "compute_pct": 50,
            "memory_mib": 8192,
            "owner": me,
        }
        result["put_2"] = agent_put_desired([slice_env, slice_owner])
        result["phases"].append(phase("owner slice added", pids))
        metrics_url = f"http://127.0.0.1:{PORT}/metrics"
        with urllib.request.urlopen(metrics_url, timeout=10) as r:
            metrics = r.read().decode()
        result["allocation_series"] = [
            line for line in metrics.splitlines() if line.startswith("allocation_")
        ]
    finally:
        for p in jobs.values():
            p.terminate()
        for p in jobs.values():
            p.wait(timeout=30)
        agent.terminate()
        result["agent_exit"] = agent.wait(timeout=30)
        logs.close()
    (args.out / "process_check.json").write_text(json.dumps(result, indent=2))
    for ph in result.get("phases", []):
        print(f"\n## {ph['phase']}")
        print(
            f"util agent {ph['agent_util_pct']} / smi {ph['smi_util_pct']}; memory used "
            f"agent {ph['agent_memory_used_mib']} / smi {ph['smi_memory_used_mib']}; "
            f"ratios {ph['ratios']}"
        )
        print(f"pids agent {ph['agent_pids']} smi {ph['smi_pids']}")
        for j in ph["jobs"]:
            print(json.dumps(j))
        for v in ph["violations"]:
            print("violation", json.dumps(v))
    print("\nallocation series:", *result.get("allocation_series", []), sep="\n")
    print("agent exit", result["agent_exit"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
