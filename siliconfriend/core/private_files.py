"""The data home is private: folders 0700, files 0600, for everything SiliconFriend writes there.

``make_private`` sets the process's umask (so that SQLite, FAISS and every later file are created
private) and tightens what an older version left readable. The app and the command line call it
at start, before anything is opened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077


def make_private(home: Path | str) -> Path:
    """umask 077, ``home`` created 0700 if missing, and every folder / file under it 0700 / 0600."""
    os.umask(PRIVATE_UMASK)
    home = Path(home).expanduser()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    tighten(home)
    return home


def tighten(folder: Path | str) -> None:
    """Folders 0700 and files 0600 under (and including) ``folder``; links are left alone."""
    folder = Path(folder)
    _chmod(folder, 0o700)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            _chmod(Path(root) / name, 0o700)
        for name in files:
            _chmod(Path(root) / name, 0o600)


def _chmod(path: Path, mode: int) -> None:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
        return
    try:
        path.chmod(mode)
    except PermissionError:  # not ours (a shared folder): left as it is
        pass
