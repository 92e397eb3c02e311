"""agentcell as user nobody can run it: a copy of the Python, its packages, agentcell and
the tests' helpers in a 0755 temporary folder, made once per session.

A checkout, a virtualenv or a pyenv Python may sit in a folder only its owner can enter
(root's 0700 home, a private CI folder): user nobody then cannot even start Python there.
Files are hard-linked where the folder is on the same file system (instant), copied
where not. Only setpriv and root are required: nothing is skipped for a folder's mode.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import agentcell

NOBODY = 65534
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
_ROOT = Path(agentcell.__file__).resolve().parents[1]
_TESTS = Path(__file__).resolve().parent
_LAYERS = ("protocol", "worker", "orchestrator")


@dataclass(frozen=True)
class Runtime:
    folder: Path
    python: str
    env: dict[str, str]

    def command(self, *args: str) -> list[str]:
        """``args`` (a script and its arguments) run by this Python as user nobody."""
        become = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        return [*become, self.python, *args]

    def home(self) -> Path:
        """A fresh folder nobody owns, in the runtime (removed with it)."""
        home = Path(tempfile.mkdtemp(prefix="home-", dir=self.folder))
        os.chown(home, NOBODY, NOBODY)
        return home


def unavailable() -> str | None:
    """Why nobody's runs cannot happen here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root, to become user nobody"
    if not os.access(SETPRIV, os.X_OK):
        return "needs setpriv (util-linux)"
    return None


@functools.cache
def runtime() -> Runtime:
    folder = Path(tempfile.mkdtemp(prefix="agentcell-nobody-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    folder.chmod(0o755)
    python_home = folder / "python"
    _link_tree(Path(sys.base_prefix), python_home)
    site = folder / "site"
    _link_tree(Path(sysconfig.get_paths()["purelib"]), site, skip=("__editable__",))
    package = folder / "pkg" / "agentcell"
    _copy_sources(_ROOT / "agentcell", package)
    for layer in _LAYERS:
        _copy_sources(_ROOT / layer, package / layer)
    helpers = folder / "tests"
    helpers.mkdir()
    for helper in _TESTS.glob("*.py"):
        shutil.copy2(helper, helpers / helper.name)
    python = python_home / "bin" / Path(sys.executable).name
    if not python.exists():
        python = python_home / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    env = {
        "PATH": f"{python.parent}:/usr/bin:/bin",
        "PYTHONPATH": f"{folder / 'pkg'}:{site}:{helpers}",
        "LD_LIBRARY_PATH": str(python_home / "lib"),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }
    return Runtime(folder=folder, python=str(python), env=env)


def _copy_sources(source: Path, target: Path) -> None:
    """This checkout's sources, copied (a test changes nothing of the checkout)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    for folder, _, files in os.walk(target):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def _link_tree(source: Path, target: Path, skip: tuple[str, ...] = ()) -> None:
    """``source`` at ``target``, readable by all: a file others may already read is hard
    linked (nothing of the original changes), any other copied; the new folders get a+rx."""
    ignore = shutil.ignore_patterns("__pycache__", *(f"{name}*" for name in skip))
    shutil.copytree(source, target, symlinks=True, copy_function=_share, ignore=ignore)
    for folder, _, _ in os.walk(target):
        os.chmod(folder, 0o755)


def _share(source: str, target: str) -> None:
    mode = os.stat(source).st_mode
    if mode & 0o004:
        try:
            os.link(source, target)
            return
        except OSError:
            pass  # another file system: a copy
    shutil.copy2(source, target)
    os.chmod(target, mode | 0o444)
