"""Small helpers for writing Prometheus's text format by hand."""

from __future__ import annotations


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)


def number(value: float | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value) if isinstance(value, int) else repr(float(value))


def family(lines: list[str], series: str, kind: str, help_text: str, samples: list[str]) -> None:
    # A family nobody can fill is left out entirely, HELP and TYPE included.
    if samples:
        lines += [f"# HELP {series} {help_text}", f"# TYPE {series} {kind}", *samples]
