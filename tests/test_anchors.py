"""The anchors helper: a clone without the reference data skips, CI without it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import anchors


@pytest.fixture
def no_anchor_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(anchors.PATH_VARIABLE, raising=False)
    monkeypatch.delenv(anchors.REQUIRE_VARIABLE, raising=False)
    return monkeypatch


def test_a_missing_anchor_folder_skips_saying_what_is_missing_and_how_to_get_it(
    no_anchor_settings: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    no_anchor_settings.setenv(anchors.PATH_VARIABLE, str(tmp_path / "nowhere"))
    with pytest.raises(pytest.skip.Exception) as skipped:
        anchors.dcgm_exporter()
    message = str(skipped.value)
    assert str(tmp_path / "nowhere" / "dcgm-exporter") in message
    assert "default-counters.csv" in message and "dcgm-exporter-dashboard.json" in message
    assert anchors.PATH_VARIABLE in message and str(anchors.DEFAULT_ROOT) in message


def test_a_missing_anchor_folder_fails_when_anchors_are_required(
    no_anchor_settings: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    no_anchor_settings.setenv(anchors.PATH_VARIABLE, str(tmp_path))
    no_anchor_settings.setenv(anchors.REQUIRE_VARIABLE, "1")
    with pytest.raises(pytest.fail.Exception, match=r"REQUIRE_ANCHORS is set") as failed:
        anchors.anchor_dir("dcgm-exporter")
    assert str(tmp_path / "dcgm-exporter") in str(failed.value)


def test_the_anchor_path_setting_is_honoured(
    no_anchor_settings: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "dcgm-exporter").mkdir()
    no_anchor_settings.setenv(anchors.PATH_VARIABLE, str(tmp_path))
    no_anchor_settings.setenv(anchors.REQUIRE_VARIABLE, "1")
    assert anchors.dcgm_exporter() == tmp_path / "dcgm-exporter"


def test_without_the_setting_the_shared_folder_beside_the_repository_is_read(
    no_anchor_settings: pytest.MonkeyPatch,
) -> None:
    assert anchors.anchors_root() == anchors.REPO.parent / "shared" / "anchors"
    no_anchor_settings.setenv(anchors.PATH_VARIABLE, "  ")
    assert anchors.anchors_root() == anchors.DEFAULT_ROOT
