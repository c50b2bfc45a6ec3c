"""Simplified Chinese is complete, and the compiled catalogue matches its source."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

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


def po_entries(path: Path) -> list[tuple[str, str]]:
    """(msgid, msgstr) of every entry of a .po file; each plural form is paired with msgid."""
    entries: list[dict[str, str]] = []
    key = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith('"'):
            key, _, line = line.partition(" ")
            if key in ("msgid", "msgctxt") and (
                not entries or any(k.startswith("msgstr") for k in entries[-1])
            ):
                entries.append({})
        # .po strings use C escapes, which Python's string literals read the same way.
        entries[-1][key] = entries[-1].get(key, "") + ast.literal_eval(line)
    return [
        (entry["msgid"], text)
        for entry in entries
        for key, text in entry.items()
        if key.startswith("msgstr") and entry["msgid"]
    ]


# A card's memory is 显存 and its power draw 功耗, as on the GPU cards; 内存 stays only for a
# host's own memory, which a msgid must then name.
GPU_WORDS = re.compile(r"\b(memory|power)\b", re.IGNORECASE)
HOST_MEMORY = re.compile(r"\b(host|system)\b.*\bmemory\b|\bRAM\b", re.IGNORECASE)


def test_chinese_calls_gpu_memory_xiancun_and_power_gonghao_everywhere():
    wrong = [
        (msgid, msgstr)
        for msgid, msgstr in po_entries(CATALOGUE / "django.po")
        if ("功率" in msgstr or ("内存" in msgstr and not HOST_MEMORY.search(msgid)))
        or (GPU_WORDS.search(msgid) and not HOST_MEMORY.search(msgid)
            and ("显存" if "memory" in msgid.lower() else "功耗") not in msgstr)
    ]  # fmt: skip
    assert not wrong, wrong


def test_the_po_reader_pairs_ids_with_their_translations(tmp_path):
    po = tmp_path / "x.po"
    po.write_text(
        'msgid ""\nmsgstr "Language: zh_Hans\\n"\n\n'
        '#: a.py:1\nmsgid "Power"\nmsgstr "功耗"\n\n'
        'msgctxt "gpu"\nmsgid ""\n"Memory "\n"used"\nmsgstr ""\n"已用\\"显存\\""\n\n'
        'msgid "one card"\nmsgid_plural "%(n)s cards"\nmsgstr[0] "%(n)s 张卡"\n\n'
        'msgid "Memory"\nmsgstr "显存"\n',
        encoding="utf-8",
    )
    assert po_entries(po) == [
        ("Power", "功耗"), ("Memory used", '已用"显存"'), ("one card", "%(n)s 张卡"),
        ("Memory", "显存"),
    ]  # fmt: skip


GLOSSARY = Path(__file__).resolve().parent.parent / "docs" / "glossary.md"
# What a term is not checked in: placeholders and code values (pools.change_pool, idle_minutes).
NOT_WORDS = re.compile(r"%\(\w+\)\w|\b\w+(?:[._]\w+)+\b")


def glossary() -> list[tuple[list[str], list[str]]]:
    """(English forms, Chinese words) per row of docs/glossary.md's table."""
    rows = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1] and not set(cells[0]) <= set("-") and cells[1] != "中文":
            rows.append(([f.strip() for f in cells[0].split(",")], cells[1].split(" / ")))
    return rows


def test_the_glossary_lists_the_words_the_checks_use():
    terms = {form: words for forms, words in glossary() for form in forms}
    assert terms["memory"] == ["显存"] and terms["power"] == ["功耗"]
    assert terms["compute"] == ["算力"] and terms["oversubscription"] == ["超分"]
    assert len(terms) > 40


def test_every_chinese_string_uses_the_glossarys_word_for_each_term_it_names():
    wrong = []
    for forms, words in glossary():
        term = re.compile(r"\b(" + "|".join(map(re.escape, forms)) + r")\b", re.IGNORECASE)
        for msgid, msgstr in po_entries(CATALOGUE / "django.po"):
            if forms == ["memory"] and HOST_MEMORY.search(msgid):
                continue
            named = {m.group(0).lower() for m in term.finditer(NOT_WORDS.sub(" ", msgid))}
            # A word kept in English in the Chinese too is a value (a sort key, a name).
            named = {n for n in named if n not in msgstr.lower()}
            if named and not any(word in msgstr for word in words):
                wrong.append((sorted(named), words, msgid, msgstr))
    assert not wrong, "\n".join(map(str, wrong))
