"""Where gpuctl finds the portal and its token: the environment first, then the file
``~/.config/gpuctl/config`` (``$GPUCTL_CONFIG`` names another), written mode 0600."""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

SECTION = "gpuctl"
KEYS = ("url", "token", "tenant", "pool")


def path() -> Path:
    if os.environ.get("GPUCTL_CONFIG"):
        return Path(os.environ["GPUCTL_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "gpuctl" / "config"


@dataclass
class Settings:
    url: str = ""
    token: str = ""
    tenant: str = ""  # defaults for request and run
    pool: str = ""


def read_file(where: Path | None = None) -> Settings:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(where or path(), encoding="utf-8")
    values = parser[SECTION] if parser.has_section(SECTION) else {}
    return Settings(**{key: values.get(key, "") for key in KEYS})


def load() -> Settings:
    """The file's settings, each overridden by ``GPUCTL_<KEY>`` when that is set."""
    settings = read_file()
    for key in KEYS:
        value = os.environ.get(f"GPUCTL_{key.upper()}")
        if value:
            setattr(settings, key, value)
    return settings


def save(settings: Settings, where: Path | None = None) -> Path:
    """Write the file readable by its owner alone: it holds a token."""
    where = where or path()
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    parser = configparser.ConfigParser(interpolation=None)
    parser[SECTION] = {key: getattr(settings, key) for key in KEYS if getattr(settings, key)}
    temporary = where.with_name(where.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file of the same name may have been wider open
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        parser.write(out)
    os.replace(temporary, where)
    return where
