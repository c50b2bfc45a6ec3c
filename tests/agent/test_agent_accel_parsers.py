"""Every captured vendor-tool output in ../shared/anchors/accelerators parses to the readings
written here, read off each file by hand. The captures are other people's data: they are
read from the anchors folder at test time, never copied into the repository."""

from __future__ import annotations

import pytest

from agents.gpu_agent.backends.smi import (
    amd_smi,
    cnmon,
    hy_smi,
    mthreads_gmi,
    mx_smi,
    npu_smi,
    rocm_smi,
)
from agents.gpu_agent.backends.smi.common import lenient_json, mib, number, percent
from tests.anchors import accelerator_file, anchor_dir


def _read(vendor: str, name: str) -> str:
    return accelerator_file(vendor, name).read_text(encoding="utf-8")


def _row(card, fields):
    return tuple(getattr(card, f) for f in fields)


INFO_FIELDS = (
    "index", "chip", "name", "pci_bus_id", "memory_used_mib", "memory_total_mib",
    "utilization_gpu_pct", "temperature_c", "power_w", "health",
)  # fmt: skip

# file: (version, chip count, first chip, last chip, {(npu, chip): [(pid, name, MiB), ...]}
# for the first chip's processes, total process rows)
NPU_SMI_INFO = {
    "doc_npu-smi-info_310_v20.2.0.txt": (
        "20.2.0", 4,
        (215, 0, "Ascend 310", "0000:DA:00.0", 2703, 8192, 0, 56, 12.8, "OK"),
        (215, 3, "Ascend 310", "0000:DB:00.0", 2703, 8192, 0, 55, 12.8, "OK"),
        None, 0,
    ),
    "doc_npu-smi-info_310_v21.0.4.txt": (
        "21.0.4", 4,
        (6, 0, "Ascend 310", "0000:89:00.0", 2703, 8192, 0, 73, 12.8, "OK"),
        (6, 3, "Ascend 310", "0000:8C:00.0", 2867, 8192, 0, 65, 12.8, "OK"),
        None, 0,
    ),
    # HBM is the card's memory; the DDR column (1867 / 15077) is the control CPU's.
    "doc_npu-smi-info_910A_v22.0.3.1.txt": (
        "22.0.3.1", 8,
        (0, 0, "Ascend 910A", "0000:61:00.0", 0, 32768, 0, 43, 67.2, "OK"),
        (7, 0, "Ascend 910A", "0000:3D:00.0", 0, 32768, 0, 40, 191.4, "OK"),
        None, 0,
    ),
    # Power NA, and the name cell one column short of its neighbours.
    "doc_npu-smi-info_910A_v22.0.3_power-NA_flagperf.txt": (
        "22.0.3", 1,
        (4, 0, "Ascend 910A", "0000:81:00.0", 861, 21534, 0, 43, None, "OK"),
        (4, 0, "Ascend 910A", "0000:81:00.0", 861, 21534, 0, 43, None, "OK"),
        None, 0,
    ),
    "doc_npu-smi-info_910B2Cx2_v23.0.3_no-processes_paddle-docs.txt": (
        "23.0.3", 2,
        (0, 0, "Ascend 910B2C", "0000:5A:00.0", 3317, 65536, 0, 53, 89.9, "OK"),
        (1, 0, "Ascend 910B2C", "0000:29:00.0", 3316, 65536, 0, 53, 93.8, "OK"),
        None, 0,
    ),
    "doc_npu-smi-info_910_v24.1.RC2_with-processes.txt": (
        "24.1.RC2", 8,
        (0, 0, "Ascend xxx", "0000:C1:00.0", 0, 32768, 0, 42, 70.5, "OK"),
        (7, 0, "Ascend xxx", "0000:02:00.0", 0, 32768, 0, 42, 203.2, "Warning"),
        [(37656, "hlt_host_devmm_", 686), (37664, "hlt_host_devmm_", 686),
         (37640, "hlt_host_devmm_", 686), (37648, "hlt_host_devmm_", 686)],
        32,
    ),
    "real_npu-smi-info_910B2C_v23.0.3_with-processes_vllm-ascend-324.txt": (
        "23.0.3", 4,
        (12, 0, "Ascend 910B2C", "0000:D9:00.0", 52675, 65536, 0, 53, 91.3, "OK"),
        (15, 0, "Ascend 910B2C", "0000:C9:00.0", 52665, 65536, 0, 55, 92.9, "OK"),
        [(78617, "python", 49385)],
        4,
    ),
    # A3: two chips per NPU, the second's power "-"; process names empty.
    "real_npu-smi-info_A3-Ascend910-16die_v25.2.0_loaded_vllm-ascend-3002.txt": (
        "25.2.0", 16,
        (0, 0, "Ascend910", "0000:9D:00.0", 61609, 65536, 7, 43, 211.3, "OK"),
        (7, 1, "Ascend910", "0000:83:00.0", 61631, 65536, 7, 43, None, "OK"),
        [(pid, None, 141) for pid in
         (935440, 936673, 930242, 934451, 931572, 941045, 942487, 929673)],
        23,  # NPU 0: 8 rows on chip 0 and 1 on chip 1; NPUs 1-7: one per chip
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NPU_SMI_INFO))
def test_npu_smi_info(name: str) -> None:
    version, count, first, last, first_procs, total_procs = NPU_SMI_INFO[name]
    info = npu_smi.parse_info(_read("ascend", name))
    assert info.version == version
    assert len(info.cards) == count
    assert _row(info.cards[0], INFO_FIELDS) == first
    assert _row(info.cards[-1], INFO_FIELDS) == last
    procs = info.cards[0].processes
    got = None if procs is None else [(p.pid, p.name, p.memory_used_mib) for p in procs]
    assert got == first_procs
    assert sum(len(c.processes or ()) for c in info.cards) == total_procs


def test_npu_smi_a3_process_on_the_second_chip() -> None:
    cards = npu_smi.parse_info(
        _read("ascend", "real_npu-smi-info_A3-Ascend910-16die_v25.2.0_loaded_vllm-ascend-3002.txt")
    ).cards
    second = cards[1]
    assert (second.index, second.chip, second.power_w, second.temperature_c) == (0, 1, None, 44)
    assert [(p.pid, p.memory_used_mib) for p in second.processes] == [(929405, 58780)]
    # The same PID on two chips of different NPUs is listed on each.
    holders = [(c.index, c.chip) for c in cards for p in c.processes or () if p.pid == 929673]
    assert holders == [(0, 0), (1, 0)]


def test_npu_smi_310_keeps_ddr_and_hugepages_as_extras() -> None:
    card = npu_smi.parse_info(_read("ascend", "doc_npu-smi-info_310_v21.0.4.txt")).cards[1]
    assert card.extra == {
        "hugepages_used": 0, "hugepages_total": 970, "ddr_used_mib": 2867, "ddr_total_mib": 8192
    }  # fmt: skip


# file: (NPU id, chip id, logic id, name) per chip; Mcu rows are not chips.
NPU_SMI_MAPPING = {
    "doc_npu-smi-info-m_310_v20.2.0.txt": [(215, c, c, "MiniD") for c in range(4)],
    "doc_npu-smi-info-m_310_v21.0.4.txt": [(6, c, c, "MiniD") for c in range(4)],
    "doc_npu-smi-info-m_910A_v22.0.3.1.txt": [(n, 0, n, "Ascend 910A") for n in range(8)],
    "doc_npu-smi-info-m_910A_v24.1.RC2.txt": [(n, 0, n, "Ascend 910A") for n in range(8)],
    "gpustack-test_npu-smi-info-m_910B.txt": [(n, 0, n, "Ascend xxx") for n in range(8)],
    "gpustack-test_npu-smi-info-m_310P.txt": [
        (npu, chip, 2 * i + chip, "Ascend xxx")
        for i, npu in enumerate((1, 2, 4, 5))
        for chip in (0, 1)
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NPU_SMI_MAPPING))
def test_npu_smi_mapping(name: str) -> None:
    assert npu_smi.parse_mapping(_read("ascend", name)) == NPU_SMI_MAPPING[name]


STATS_FIELDS = (
    "npu", "chip", "memory_total_mib", "memory_usage_pct", "aicore_pct", "aicpu_pct",
    "vectorcore_pct", "aicore_clock_mhz", "temperature_c", "power_w",
)  # fmt: skip
NPU_SMI_STATS = {
    # "Chip ID" ends its block in -t usages; HBM capacity wins over DDR where shown.
    "gpustack-test_npu-smi-info-t-usages_910B.txt": [
        (0, 0, 32768, 0, 0, 0, None, None, None, None)
    ],
    "gpustack-test_npu-smi-info-t-usages_310P.txt": [
        (1, 0, 44280, 3, 0, 0, 0, None, None, None),
        (1, 1, 43693, 3, 0, 0, 0, None, None, None),
    ],
    # The mcu block's 45.2 W is the board controller's, not a chip's.
    "gpustack-test_npu-smi-info-t-common_910B.txt": [
        (0, 0, None, 6, 0, None, None, 1000, 46, 69.0)
    ],
    "gpustack-test_npu-smi-info-t-common_310P.txt": [
        (1, 0, None, 3, 0, None, None, 960, 60, None),
        (1, 1, None, 3, 0, None, None, 960, 59, None),
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NPU_SMI_STATS))
def test_npu_smi_chip_stats(name: str) -> None:
    stats = npu_smi.parse_chip_stats(_read("ascend", name))
    assert [_row(s, STATS_FIELDS) for s in stats] == NPU_SMI_STATS[name]


def test_npu_smi_health_alarm_in_a_collect_log() -> None:
    health = npu_smi.parse_health(
        _read("ascend", "mindcluster-test_npu-smi-health-alarm_910A_driver23.0.7_collect-log.txt")
    )
    assert health is not None
    assert health.status == "Alarm"
    assert health.error_codes == ["A4025021", "8C03A000", "8C084E00"]
    assert health.information.startswith("ascend_monitor adda heart beat lost error")
    assert "Heartbeat Lost." in health.information


HY_FIELDS = ("index", "temperature_c", "power_w", "power_limit_w", "utilization_gpu_pct",
             "fan_speed_pct")  # fmt: skip
# file: per DCU (index, temperature, power, cap, DCU%, fan), and VRAM% per DCU.
HY_SMI_TABLES = {
    "doc_hy-smi_K100_AI-x4_dtk24.04.1_paddlenlp.txt": (
        [(0, 49, 118.0, 800.0, 0, None), (1, 48, 120.0, 800.0, 0, None),
         (2, 53, 116.0, 800.0, 0, None), (3, 49, 138.0, 800.0, 0, None)],
        [0, 0, 0, 0],
    ),
    "doc_rocm-smi-on-DTK_8dcu-K100-64G_dtk23.10.1_flagperf.txt": (
        [(i, t, p, 300.0, 0, None) for i, (t, p) in enumerate(
            [(53, 96.0), (53, 96.0), (54, 95.0), (55, 96.0), (54, 97.0), (54, 95.0),
             (55, 93.0), (54, 96.0)])],
        [0] * 8,
    ),
    # Compact layout: lower-case "c", a Fan column, no Mode.
    "doc_rocm-smi-on-DTK_old-format-4dcu_dtk23.10.1_paddle-docs.txt": (
        [(0, 30, 38.0, 280.0, 0, 0), (1, 30, 41.0, 280.0, 0, 0),
         (2, 29, 38.0, 280.0, 0, 0), (3, 29, 39.0, 280.0, 0, 0)],
        [0] * 4,
    ),
    # 8.0 W on every busy card: implausible, but it is what the tool printed.
    "real_hy-smi_8dcu_vllm-loaded_wang-junjian-blog.txt": (
        [(i, t, 8.0, 600.0, u, None) for i, (t, u) in enumerate(
            [(67, 74), (68, 29), (69, 31), (68, 28), (71, 35), (73, 17), (70, 37), (68, 46)])],
        [87, 85, 85, 85, 85, 85, 85, 85],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(HY_SMI_TABLES))
def test_hy_smi_table(name: str) -> None:
    rows, vram = HY_SMI_TABLES[name]
    cards = hy_smi.parse_table(_read("hygon", name))
    assert [_row(c, HY_FIELDS) for c in cards] == rows
    assert [c.extra["vram_used_pct"] for c in cards] == vram
    # The table has no MiB: memory stays absent rather than derived from VRAM%.
    assert all(c.memory_used_mib is None and c.memory_total_mib is None for c in cards)
    assert all(c.vendor == "hygon" for c in cards)


def test_hy_smi_showproductname_with_an_empty_card_series() -> None:
    keyed = hy_smi.parse_keyed(
        _read(
            "hygon", "real_hy-smi--showproductname_K100_empty-card-series_hami-dcu-plugin-pr4.txt"
        )
    )
    assert keyed == {
        0: {"Card Series": None, "Card Vendor": "Chengdu Haiguang IC Design Co., Ltd."}
    }


ROCM_FIELDS = (
    "vendor", "index", "name", "uuid", "serial", "pci_bus_id", "memory_used_mib",
    "memory_total_mib", "utilization_gpu_pct", "utilization_memory_pct", "temperature_c",
    "memory_temperature_c", "power_w", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz",
    "pcie_replay_total",
)  # fmt: skip
MI100 = "Arcturus GL-XL [Instinct MI100]"
ROCM_SMI_JSON = {
    ("hygon", "gpustack-test_rocm-smi-json_hygon-K100_AI_dtk24.04.3_anonymised.json"): [
        ("hygon", 0, "DCU xxxx", "7100fa8866904061", "TPXxxxx", None, 2, 65520, 0, None, 41,
         44, 80.0, None, None, None, None),
    ],
    # Bytes: 11615076352 B used of 17163091968 B.
    ("amd", "gpustack-test_rocm-smi-json_RX7800XT_rocm6.2.4.json"): [
        ("amd", 0, "Navi 32 [Radeon RX 7700 XT / 7800 XT]", "0x5c88007d760374f3", None, None,
         11077, 16368, 100, None, 45, 54, 53.0, None, None, None, None),
    ],
    ("amd", "telegraf-test_rocm-smi-json_mi100_rocm602.json"): [
        ("amd", 0, MI100, "0x79ccd55167a2124a", None, "0000:83:00.0", 6, 32752, 0, 0, 53, 53,
         36.0, 290.0, 300, 1200, 0),
        ("amd", 1, MI100, "0x4edfb117a17a07d", None, "0000:A3:00.0", 6, 32752, 0, 0, 55, 54,
         44.0, 290.0, 300, 1200, 0),
        ("amd", 2, MI100, "0xd4a9ec48d03d261d", None, "0000:C3:00.0", 6, 32752, 0, 0, 54, 55,
         43.0, 290.0, 300, 1200, 0),
        ("amd", 3, MI100, "0x1b9dd972253c3736", None, "0000:E3:00.0", 6, 32752, 0, 0, 51, 50,
         39.0, 290.0, 300, 1200, 0),
    ],
    # ROCm 6.1: "GPU memory use (%)" became "GPU Memory Read/Write Activity (%)"; Unique ID N/A.
    ("amd", "telegraf-test_rocm-smi-json_rx6700xt_rocm612.json"): [
        ("amd", 0, "Navi 22 [Radeon RX 6700/6700 XT / 6800M]", None, None, "0000:07:00.0",
         1500, 12272, 0, 0, 45, 46, 6.0, 211.0, 0, 96, 0),
    ],
}  # fmt: skip


@pytest.mark.parametrize(("vendor", "name"), sorted(ROCM_SMI_JSON))
def test_rocm_smi_json(vendor: str, name: str) -> None:
    cards = rocm_smi.parse_json(_read(vendor, name))
    assert [_row(c, ROCM_FIELDS) for c in cards] == ROCM_SMI_JSON[(vendor, name)]


def test_rocm_smi_json_allocated_vram_is_an_extra_not_memory_busy() -> None:
    (card,) = rocm_smi.parse_json(_read("amd", "telegraf-test_rocm-smi-json_rx6700xt_rocm612.json"))
    assert card.extra == {"vram_used_pct": 12}


def test_amd_smi_metric_power_json_list() -> None:
    cards = amd_smi.parse_json(
        _read("amd", "doc_amd-smi-metric-p-json_list-format_amdsmi-changelog.json")
    )
    assert [(c.index, c.power_w, c.utilization_gpu_pct, c.memory_used_mib) for c in cards] == [
        (0, 10.0, None, None)
    ]


def test_amd_smi_metric_power_text() -> None:
    cards = amd_smi.parse_text(
        _read("amd", "doc_amd-smi-metric-power_text_navi_amdsmi-changelog.txt")
    )
    assert [(c.index, c.power_w, c.temperature_c) for c in cards] == [
        (0, 11.0, None),
        (1, 17.0, None),
    ]


COVERED = {
    "ascend": set(NPU_SMI_INFO) | set(NPU_SMI_MAPPING) | set(NPU_SMI_STATS)
    | {"mindcluster-test_npu-smi-health-alarm_910A_driver23.0.7_collect-log.txt"},
    "hygon": set(HY_SMI_TABLES)
    | {n for v, n in ROCM_SMI_JSON if v == "hygon"}
    | {"real_hy-smi--showproductname_K100_empty-card-series_hami-dcu-plugin-pr4.txt"},
    "amd": {n for v, n in ROCM_SMI_JSON if v == "amd"}
    | {"doc_amd-smi-metric-p-json_list-format_amdsmi-changelog.json",
       "doc_amd-smi-metric-power_text_navi_amdsmi-changelog.txt"},
}  # fmt: skip


# Units, blanks and broken JSON, on small strings of the shapes the tools print.
@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        ("65536", "MB", 65536), ("65520", "MiB", 65520), ("17163091968", "B", 16368),
        ("1048576", "KB", 1024), ("2 GiB", None, 2048), ("2703 MB", None, 2703),
        ("NA", "MB", None), ("-", "MiB", None), ("N/A", "B", None), ("12", "parsecs", None),
    ],
)  # fmt: skip
def test_mib(value: str, unit: str | None, expected: int | None) -> None:
    assert mib(value, unit) == expected


def test_blanks_are_absent_not_zero() -> None:
    assert [number(v) for v in ("NA", "-", "N/A", "", None)] == [None] * 5
    assert number("(1402Mhz)") == 1402.0
    assert percent("101%") is None and percent("0%") == 0


def test_json_with_missing_commas() -> None:
    raw = '{"card0": {"Average Graphics Package Power (W)": "91.0""HCU use (%)": "7" "": ""}}'
    assert lenient_json(raw) == {
        "card0": {"Average Graphics Package Power (W)": "91.0", "HCU use (%)": "7", "": ""}
    }
    (card,) = rocm_smi.parse_json(raw)
    assert (card.vendor, card.utilization_gpu_pct, card.power_w) == ("hygon", 7, 91.0)
    with pytest.raises(ValueError):
        lenient_json('{"a": }')


TABLE_FIELDS = (
    "index", "name", "pci_bus_id", "memory_used_mib", "memory_total_mib", "utilization_gpu_pct",
    "temperature_c", "power_w", "power_limit_w", "fan_speed_pct", "health",
)  # fmt: skip
MT_S4000 = "doc_mthreads-gmi_MTT-S4000_gmi1.12.2_drv1.2.0_FAQ-memory-shown-32768-fault.txt"
MT_S80 = "real_mthreads-gmi_MTT-S80_gmi1.14.0_drv2.7.0_llama-box-98pct_gpustack-docs.txt"
MX_BUS_550 = ("2a", "3a", "4c", "5c", "aa", "ba", "ca", "da")
MX_BUS_C550 = ("0f", "34", "48", "5a", "87", "ae", "c2", "d7")
MX_BUS_500 = ("05", "08", "0e", "0f")
# file: (tool version, driver version, cards, processes as (card, pid, name, MiB))
TABLES = {
    ("metax", "doc_mx-smi_MXC550x8_v2.1.6_paddlenlp.txt"): (
        "2.1.6", "2.5.014",
        [(i, "MXC550", f"0000:{b}:00.0", 810, 65536, 0, t, p, None, None, None)
         for i, (b, t, p) in enumerate(zip(MX_BUS_550, (31, 31, 31, 31, 30, 31, 30, 30),
                                           (44, 46, 47, 46, 46, 47, 46, 47), strict=True))],
        [],
    ),
    # 2.2.x: "53W / 450W" and GPU-State "Available".
    ("metax", "doc_mx-smi_MetaX-C550x8_v2.2.4_pwr-cap-gpu-state_ernie.txt"): (
        "2.2.4", "2.15.9",
        [(i, "MetaX C550", f"0000:{b}:00.0", 858, 65536, 0, t, p, 450.0, None, "OK")
         for i, (b, t, p) in enumerate(zip(MX_BUS_C550, (29, 29, 30, 29, 30, 32, 32, 31),
                                           (53, 53, 54, 54, 53, 55, 56, 56), strict=True))],
        [],
    ),
    # No "mx-smi version:" line above the log: the table's own MX-SMI line names it.
    ("metax", "real_mx-smi_MXC500x4_v2.1.6_busy-36pct_wang-junjian-blog.txt"): (
        "2.1.6", "2.5.014",
        [(i, "MXC500", f"0000:{b}:00.0", m, 65536, u, 54 if i != 2 else 53, p, None, None, None)
         for i, (b, m, u, p) in enumerate(zip(MX_BUS_500, (60278, 59830, 59830, 59830),
                                              (36, 36, 24, 35), (122, 125, 122, 122),
                                              strict=True))],
        [(0, 343683, "python", 59328), (1, 350950, "ray::RayWorkerW", 58880),
         (2, 351042, "ray::RayWorkerW", 58880), (3, 351132, "ray::RayWorkerW", 58880)],
    ),
    ("metax", "real_mx-smi_MXC500x4_v2.1.6_vllm-loaded_wang-junjian-blog.txt"): (
        "2.1.6", "2.5.014",
        [(i, "MXC500", f"0000:{b}:00.0", m, 65536, 0, t, p, None, None, None)
         for i, (b, m, t, p) in enumerate(zip(MX_BUS_500, (60982, 60534, 60534, 60534),
                                              (51, 51, 50, 50), (71, 76, 74, 71), strict=True))],
        [(0, 15652, "python", 60032), (1, 22854, "ray::RayWorkerW", 59584),
         (2, 22945, "ray::RayWorkerW", 59584), (3, 23034, "ray::RayWorkerW", 59584)],
    ),
    # The vendor FAQ's fault: 44302 MiB used of 32768 on a 48 GB card (IOMMU off); kept as
    # printed and flagged. No power column in mthreads-gmi's table.
    ("moorethreads", MT_S4000): (
        "1.12.2", "1.2.0",
        [(0, "MTT S4000", "00000000:08:00.0", 44302, 32768, 88, 65, None, None, None,
          "reports more memory used than its total")],
        [],
    ),
    ("moorethreads", MT_S80): (
        "1.14.0", "2.7.0",
        [(0, "MTT S80", "00000000:01:00.0", 1339, 16384, 98, 56, None, None, None, None)],
        [(0, 120, "...ird_party/bin/llama-box/llama-box", 2),
         (0, 2022, "...ird_party/bin/llama-box/llama-box", 1333)],
    ),
    ("cambricon", "doc_cnmon_MLU370-X8x2_v5.10.13_paddle-docs.txt"): (
        "5.10.13", "5.10.13",
        [(0, "MLU370-X8", "0000:39:00.0", 0, 23374, 0, 32, 106.0, 250.0, 0, None),
         (1, "MLU370-X8", "0000:3D:00.0", 0, 23374, 0, 39, 106.0, 250.0, 0, None)],
        [],
    ),
    # Total memory masked as "xxxxx MiB" in the source: absent, not 0.
    ("cambricon", "doc_cnmon_MLUXXX-x8_v5.10.31_masked_paddlenlp.txt"): (
        "5.10.31", "5.10.31",
        [(i, "MLUXXX-XX", f"0000:{b}:00.0", 0, None, 0, t, p, 550.0, 0, None)
         for i, (b, t, p) in enumerate(zip(("4F", "53", "6F", "73", "AF", "B3", "CF", "D3"),
                                           (35, 34, 35, 34, 34, 33, 36, 33),
                                           (105, 100, 100, 109, 107, 105, 102, 105),
                                           strict=True))],
        [],
    ),
}  # fmt: skip
TABLE_PARSERS = {
    "metax": mx_smi.parse,
    "moorethreads": mthreads_gmi.parse,
    "cambricon": cnmon.parse,
}


@pytest.mark.parametrize(("vendor", "name"), sorted(TABLES))
def test_vendor_tables(vendor: str, name: str) -> None:
    version, driver, rows, processes = TABLES[(vendor, name)]
    info = TABLE_PARSERS[vendor](_read(vendor, name))
    assert (info.version, info.driver_version) == (version, driver)
    expected = [tuple(float(v) if f == "power_w" and v is not None else v
                      for f, v in zip(TABLE_FIELDS, row, strict=True)) for row in rows]  # fmt: skip
    assert [_row(c, TABLE_FIELDS) for c in info.cards] == expected
    got = [
        (c.index, p.pid, p.name, p.memory_used_mib) for c in info.cards for p in c.processes or ()
    ]
    assert got == processes
    assert {c.vendor for c in info.cards} == {vendor}


COVERED.update(
    {
        vendor: {n for v, n in TABLES if v == vendor}
        for vendor in ("metax", "moorethreads", "cambricon")
    }
)


@pytest.mark.parametrize("vendor", sorted(COVERED))
def test_every_capture_has_its_test(vendor: str) -> None:
    folder = anchor_dir("accelerators") / vendor
    files = {p.name for p in folder.iterdir() if p.is_file() and p.name != "SOURCE.md"}
    assert files == COVERED[vendor]


TEXT_PARSERS = {
    "ascend": lambda t: npu_smi.parse_info(t).cards + npu_smi.parse_mapping(t)
    + npu_smi.parse_chip_stats(t),
    "hygon": lambda t: hy_smi.parse_table(t) + list(hy_smi.parse_keyed(t)),
    "amd": amd_smi.parse_text,
    **TABLE_PARSERS,
}  # fmt: skip


@pytest.mark.parametrize("vendor", sorted(TEXT_PARSERS))
def test_cut_off_output_never_raises(vendor: str) -> None:
    """A tool killed by the timeout prints half a table: every prefix of every capture, cut
    at a line or mid-line, parses to fewer readings, never to an exception."""
    folder = anchor_dir("accelerators") / vendor
    parse = TEXT_PARSERS[vendor]
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        for cut in range(len(lines) + 1):
            prefix = "".join(lines[:cut])
            parse(prefix)
            parse(prefix + (lines[cut][: len(lines[cut]) // 2] if cut < len(lines) else ""))


@pytest.mark.parametrize(
    ("vendor", "name"), [(v, n) for v, n in sorted(ROCM_SMI_JSON)]
)  # fmt: skip
def test_cut_off_json_is_a_value_error(vendor: str, name: str) -> None:
    """Half a JSON document is refused as ValueError, which the backend turns into the
    tool's failure (cards lost), never read as fewer cards."""
    text = _read(vendor, name)
    for cut in range(1, len(text) - 1, max(1, len(text) // 40)):
        with pytest.raises(ValueError):
            rocm_smi.parse_json(text[:cut])
