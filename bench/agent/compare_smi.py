"""Compare the agent's NVML backend with nvidia-smi on a real GPU node.

    python -m bench.agent.compare_smi [--json OUT.json]

Reads every card once through ``NvmlBackend`` and once through ``nvidia-smi
--query-gpu``, back to back, and prints a table per card: field, agent, nvidia-smi,
and whether they agree (identity exactly; readings that move within a tolerance,
since the two reads are a moment apart). Also reports the agent's CPU per collection
on this card. Needs the NVIDIA driver; it imports nothing from Django.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

# (agent key, nvidia-smi field, tolerance): None compares exactly; a number is the
# largest difference two reads a moment apart may show.
FIELDS: list[tuple[str, str, float | None]] = [
    ("index", "index", None),
    ("uuid", "uuid", None),
    ("name", "name", None),
    ("serial", "serial", None),
    ("pci_bus_id", "pci.bus_id", None),
    ("memory_total_mib", "memory.total", None),
    # nvidia-smi rounds bytes to MiB where NVML's readers floor: 1 MiB apart is the same.
    ("memory_used_mib", "memory.used", 64),
    ("memory_free_mib", "memory.free", 64),
    ("memory_reserved_mib", "memory.reserved", 1),
    ("utilization_gpu_pct", "utilization.gpu", 15),
    ("utilization_memory_pct", "utilization.memory", 15),
    ("temperature_c", "temperature.gpu", 2),
    ("memory_temperature_c", "temperature.memory", 2),
    ("power_w", "power.draw", 30),
    ("power_limit_w", "enforced.power.limit", 0.5),
    ("sm_clock_mhz", "clocks.sm", 150),
    ("mem_clock_mhz", "clocks.mem", 150),
    ("fan_speed_pct", "fan.speed", 2),
    ("ecc_corrected_total", "ecc.errors.corrected.volatile.total", None),
    ("ecc_uncorrected_total", "ecc.errors.uncorrected.volatile.total", None),
    ("mig_mode", "mig.mode.current", None),
]


def known_fields() -> set[str]:
    """The query fields this driver's nvidia-smi knows (older ones lack some)."""
    text = subprocess.run(
        ["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True, timeout=30
    ).stdout
    return {name for _, name, _ in FIELDS if f'"{name}"' in text}


def smi_rows(names: list[str]) -> list[dict[str, str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(names)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return [
        dict(zip(names, (v.strip() for v in line.split(",")), strict=True))
        for line in out.strip().splitlines()
    ]


def agree(agent: object, smi: str, tolerance: float | None) -> str:
    missing = smi in ("[N/A]", "N/A", "[Not Supported]", "")
    if agent is None:
        return "both absent" if missing else "agent absent"
    if missing:
        return "smi N/A"
    if tolerance is None:
        if isinstance(agent, int | float):
            try:
                return "yes" if float(smi) == float(agent) else "NO"
            except ValueError:
                return "NO"
        expected = str(agent).lower()
        # nvidia-smi prints the 8-digit PCI domain; NVML may too, or 4 digits.
        return "yes" if smi.lower() in (expected, expected.replace("00000000:", "0000:")) else "NO"
    try:
        return "yes" if abs(float(smi) - float(agent)) <= tolerance else "NO"
    except (TypeError, ValueError):
        return "NO"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--collections", type=int, default=20, help="to time the CPU cost")
    args = parser.parse_args(argv)
    from agents.gpu_agent.backends.nvml import NvmlBackend

    backend = NvmlBackend(socket.gethostname())
    try:
        backend.collect()  # the first pass reads identity once per card
        snapshot = backend.collect().to_dict()
        known = known_fields()
        smi = smi_rows([name for _, name, _ in FIELDS if name in known])
        started = time.process_time()
        for _ in range(args.collections):
            backend.collect()
        cpu_ms = (time.process_time() - started) / args.collections * 1000
    finally:
        backend.close()

    report = {"driver_version": snapshot.get("driver_version"),
              "cuda_version": snapshot.get("cuda_version"),
              "cpu_ms_per_collection": round(cpu_ms, 2), "cards": []}  # fmt: skip
    for gpu, row in zip(snapshot["gpus"], smi, strict=True):
        table = [
            {"field": key, "agent": gpu.get(key), "nvidia_smi": row.get(name, "(unknown field)"),
             "agrees": agree(gpu.get(key), row[name], tolerance) if name in row else "n/a"}
            for key, name, tolerance in FIELDS
        ]  # fmt: skip
        report["cards"].append({"index": gpu["index"], "fields": table,
                                "extra": {k: gpu[k] for k in sorted(gpu) if k not in
                                          {f for f, _, _ in FIELDS} | {"processes"}}})  # fmt: skip
        print(f"\ncard {gpu['index']}  (driver {report['driver_version']}, "
              f"CUDA {report['cuda_version']})")  # fmt: skip
        print("| field | agent | nvidia-smi | agrees |\n|---|---|---|---|")
        for line in table:
            print(
                f"| {line['field']} | {line['agent']} | {line['nvidia_smi']} | {line['agrees']} |"
            )
    print(f"\nagent CPU per collection: {cpu_ms:.2f} ms ({len(smi)} card(s))")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if all(f["agrees"] != "NO" for c in report["cards"] for f in c["fields"]) else 1


if __name__ == "__main__":
    sys.exit(main())
