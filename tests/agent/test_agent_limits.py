"""The memory limit that holds a process (gpu_agent/limits.py), read from its environment
and its root through /proc, and the ``unlimited`` violation: a process of a slice that no
limit (the driver's NVIDIA_GPU_MEMORY_LIMIT from r615, HAMi-core's with libvgpu preloaded,
MPS's under an MPS server) holds to its share."""

from __future__ import annotations

import pytest

from agents.gpu_agent import limits
from agents.gpu_agent.attribution import attribute
from agents.gpu_agent.backends.procinfo import ProcessInspector
from agents.gpu_agent.backends.sim_jobs import job_for
from agents.gpu_agent.desired import Slice
from agents.gpu_agent.model import GpuReading, MigDevice, ProcessReading

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"


@pytest.mark.parametrize(
    ("env", "found"),
    [
        ({"NVIDIA_GPU_MEMORY_LIMIT": "8192"}, ("driver", 8192)),
        ({"CUDA_DEVICE_MEMORY_LIMIT": "8192m"}, ("hami", 8192)),
        ({"CUDA_DEVICE_MEMORY_LIMIT": "8g"}, ("hami", 8192)),
        ({"CUDA_DEVICE_MEMORY_LIMIT": str(8 << 30)}, ("hami", 8192)),  # bare: bytes
        ({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "1=100M,0=4096M"}, ("mps", 4096)),
        # Several: the lowest holds.
        ({"NVIDIA_GPU_MEMORY_LIMIT": "8192", "CUDA_DEVICE_MEMORY_LIMIT": "4096m"}, ("hami", 4096)),
        # Not a plain size, or no size at all: nothing is declared.
        ({"NVIDIA_GPU_MEMORY_LIMIT": "lots"}, None),
        ({"NVIDIA_GPU_MEMORY_LIMIT": "0"}, None),
        ({"NVIDIA_GPU_MEMORY_LIMIT": "9" * 40}, None),
        ({"NVIDIA_GPU_MEMORY_LIMIT": "-1"}, None),
        ({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "1=100M"}, None),
        ({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "garbage"}, None),
        ({"HOME": "/root"}, None),
    ],
)
def test_the_declared_limit_is_read_from_the_environment(env, found):
    # Every mechanism running: what the variables say.
    assert limits.declared(env, driver=True, hami=True, mps=True) == found


@pytest.mark.parametrize(
    ("running", "found"),
    [
        ({"driver": True, "hami": True, "mps": True}, ("mps", 2048)),
        ({"driver": True, "hami": True, "mps": False}, ("hami", 4096)),
        ({"driver": True, "hami": False, "mps": False}, ("driver", 8192)),
        ({"driver": False, "hami": False, "mps": False}, None),  # nothing holds it
    ],
)
def test_only_a_running_mechanisms_limit_holds(running, found):
    env = {"NVIDIA_GPU_MEMORY_LIMIT": "8192", "CUDA_DEVICE_MEMORY_LIMIT": "4096m",
           "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M"}  # fmt: skip
    assert limits.declared(env, **running) == found


def test_the_mechanisms_are_told_from_the_environment_and_the_driver():
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "4g"}  # HAMi's per-device form
    assert limits.declared(env) is None  # libvgpu not preloaded: the variable holds nothing
    assert limits.declared({**env, "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so"}) == ("hami", 4096)
    assert limits.hami_preloaded({}, "/usr/local/vgpu/libvgpu.so\n")  # /etc/ld.so.preload
    mps = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M"}
    assert limits.declared(mps) is None
    assert limits.declared({**mps, "CUDA_MPS_PIPE_DIRECTORY": "/run/mps"}) == ("mps", 1024)
    assert [limits.driver_enforces(v) for v in ("615.12.01", "620.1", "580.65.06", "", None,
                                                "x.1")] == [True, True, False, False, False,
                                                            False]  # fmt: skip


def test_the_slices_launch_settings_declare_its_memory_every_way():
    env = Slice("a-1", A, 30, 8192, "alice").launch_env()
    assert limits.declared(env, driver=True, hami=True, mps=True) == ("driver", 8192)
    assert {k: env[k] for k in limits.NAMES if k in env} == {
        "NVIDIA_GPU_MEMORY_LIMIT": "8192",
        "CUDA_DEVICE_MEMORY_LIMIT": "8192m",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M",
    }


def _fake_proc(root, pid: int, env: dict[str, str] | None) -> None:
    base = root / str(pid)
    base.mkdir()
    (base / "cmdline").write_bytes(b"python\0train.py\0")
    if env is not None:
        (base / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()))


def test_proc_keeps_only_the_allocation_and_the_limits_of_the_environment(tmp_path):
    _fake_proc(tmp_path, 10, {"GPU_PORTAL_ALLOCATION": "a-1", "AWS_SECRET": "s3cr3t",
                              "NVIDIA_GPU_MEMORY_LIMIT": "4096"})  # fmt: skip
    _fake_proc(tmp_path, 11, {"GPU_PORTAL_ALLOCATION": "a-1"})
    _fake_proc(tmp_path, 12, None)  # the environment unreadable (no root)
    # HAMi-core preloaded through the container's /etc/ld.so.preload; the first duplicate
    # counts, as getenv() reads it (a second, smaller one is no way around the check).
    _fake_proc(tmp_path, 13, {"CUDA_DEVICE_MEMORY_LIMIT": "16384m"})
    (tmp_path / "13" / "environ").write_bytes(
        b"CUDA_DEVICE_MEMORY_LIMIT=16384m\0CUDA_DEVICE_MEMORY_LIMIT=1m\0"
    )
    (tmp_path / "13" / "root" / "etc").mkdir(parents=True)
    (tmp_path / "13" / "root" / "etc" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    inspector = ProcessInspector(proc_root=tmp_path)
    inspector.driver_caps = True  # a driver of r615 or later
    first = inspector.info(10)
    assert (first.allocation_env, first.memory_limit) == ("a-1", ("driver", 4096))
    assert "s3cr3t" not in repr(first)
    assert inspector.info(11).memory_limit == "none"
    assert inspector.info(12).memory_limit is None and inspector.info(12).allocation_env is None
    assert inspector.info(13).memory_limit == ("hami", 16384)
    older = ProcessInspector(proc_root=tmp_path)  # driver_caps False: an older driver
    assert older.info(10).memory_limit == "none"  # its variable holds nothing there


def test_a_process_no_limit_holds_to_its_slice_is_unlimited():
    slices = [Slice("a-1", A, 30, 8192, "alice"), Slice("a-2", A, 30, 8192, "bob")]

    def proc(pid, limit, owner="alice"):
        return ProcessReading(pid=pid, user=owner, memory_used_mib=100, allocation_env=None,
                              memory_limit=limit)  # fmt: skip

    gpu = GpuReading(index=0, uuid=A, memory_total_mib=81920, processes=[
        proc(1, ("driver", 8192)),  # held to the slice
        proc(2, ("hami", 4096)),  # held tighter still
        proc(3, "none"),  # started without the launch settings' limits
        proc(4, ("mps", 16384), owner="bob"),  # a limit above the slice
        proc(5, None),  # the environment could not be read: not judged
    ])  # fmt: skip
    _usage, violations = attribute([gpu], slices)
    found = sorted((v.kind, v.pids[0], v.allocation_id, v.memory_limit_mib) for v in violations)
    assert found == [("unlimited", 3, "a-1", 8192), ("unlimited", 4, "a-2", 8192)]


def test_whole_cards_and_mig_slices_need_no_limit():
    mig = "MIG-bbbbbbbb-0000-0000-0000-000000000000"
    slices = [Slice("w-1", A, 100, 81920, "alice"), Slice("m-1", mig, 100, 9728, "bob")]
    gpu = GpuReading(index=0, uuid=A, memory_total_mib=81920,
                     mig_devices=[MigDevice(index=0, uuid=mig, memory_total_mib=9728)],
                     processes=[
        ProcessReading(pid=1, user="alice", memory_limit="none"),
        ProcessReading(pid=2, user="bob", allocation_env="m-1", memory_limit="none"),
    ])  # fmt: skip
    usage, violations = attribute([gpu], slices)
    assert violations == []
    assert {u.allocation_id: u.process_count for u in usage} == {"w-1": 1, "m-1": 1}


def test_a_simulated_job_runs_under_its_slices_limits():
    slice_ = Slice("a-1", A, 30, 8192, "alice")
    # On the simulated node (driver r550, HAMi-core preloaded): HAMi-core holds it.
    assert limits.declared(job_for(slice_, seed=1).env, driver=False) == ("hami", 8192)
