"""Simplified Chinese is complete, and the compiled catalogue matches its source."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests import procs

CATALOGUE = procs.REPO / "locale" / "zh_Hans" / "LC_MESSAGES"


@pytest.fixture
def msgfmt() -> str:
    path = shutil.which("msgfmt")
    if path is None:
        pytest.fail("msgfmt (Debian's gettext) is needed to check the translations")
    return path


def test_chinese_catalogue_has_no_untranslated_or_fuzzy_strings(msgfmt):
    result = subprocess.run(
        [msgfmt, "--check", "--statistics", "-o", "/dev/null", str(CATALOGUE / "django.po")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "untranslated" not in result.stderr and "fuzzy" not in result.stderr, result.stderr


def test_compiled_catalogue_is_up_to_date(msgfmt, tmp_path):
    compiled = tmp_path / "django.mo"
    subprocess.run([msgfmt, "-o", str(compiled), str(CATALOGUE / "django.po")], check=True)
    assert compiled.read_bytes() == (CATALOGUE / "django.mo").read_bytes(), (
        "run: python manage.py compilemessages -l zh_Hans --ignore .venv"
    )
