"""The image that docker-compose.yml and the Helm chart run holds every package the
portal installs: one missing (clusters/ and gpuctl/ were) fails every process at start."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent


def test_the_image_copies_every_package_and_app():
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\S+) \./(?:\1)?$", dockerfile, re.M))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    local_apps = {
        app.split(".")[0] for app in settings.INSTALLED_APPS if (ROOT / app.split(".")[0]).is_dir()
    }
    assert packages | local_apps <= copied, sorted(packages | local_apps - copied)
    assert {"templates", "static", "locale", "manage.py"} <= copied
