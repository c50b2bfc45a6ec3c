"""The portal's own folder (PORTAL_VAR_DIR): readable by the portal's user only.

It holds the embedded default's PostgreSQL data (``postgres/``, which PostgreSQL itself keeps
0700, and its log) and the secrets generated for it (the database's password, the SECRET_KEY,
the demo users' passwords, the demo agents' token). The folder is 0700 and every
file directly in it 0600, also when an older version or a restore left them looser. Secrets are
created 0600 from the first byte, never written first and restricted after.

Used from settings.py, so it imports nothing from Django.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def _owned(info: os.stat_result) -> bool:
    # Another user's folder (a mounted volume) cannot be changed by us; leave it as it is.
    return info.st_uid == os.getuid()


def make_private_dir(path: Path) -> None:
    """Create the folder 0700, tighten it and the files directly in it if looser."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    info = path.stat()
    if _owned(info) and stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(DIR_MODE)
    for entry in os.scandir(path):
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISREG(info.st_mode) and _owned(info) and stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(entry.path, stat.S_IMODE(info.st_mode) & FILE_MODE)


def private_secret(path: Path, nbytes: int) -> str:
    """A secret generated once and kept in ``path`` (0600 from the start), then read back."""
    if not path.exists():
        # Written whole to a file of our own, then linked into place: a second process
        # starting at the same moment reads either nothing there yet or the whole secret.
        scratch = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(nbytes))
            with contextlib.suppress(FileExistsError):  # another process won: use its secret
                os.link(scratch, path)
        finally:
            scratch.unlink()
    return path.read_text().strip()
