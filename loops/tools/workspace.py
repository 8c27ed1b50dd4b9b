"""The directory an executor's files are written to and its validators run in: `Workspace` (a temporary
directory it removes, or the caller's, with every file written whole or not at all), and `workspace_path`,
the one check that a file's path stays inside it (no absolute path, no `..`, no symlink out).

Its own room because where files go and how they are written safely changes with file systems, never with
how a command is run on them (`loops.tools.validators`, which re-exports both names).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path

from loops.errors import ConfigurationError

__all__ = ["Workspace", "workspace_path"]


def workspace_path(root: Path | None, relative: str | os.PathLike[str]) -> Path:
    """The absolute path of the file `relative` inside the directory `root` (resolved, symlinks followed).

    Raises `ConfigurationError` for a path that is not a file's inside the root: empty, absolute,
    ending with a separator (a directory's), the root itself (``.``), leading out through ``..`` or
    through a symlink. With `root=None` (a directory that does not exist yet) only the text is checked.
    A name that merely starts with two dots (``..sol.py``) is a file like any other.
    """
    text = os.fspath(relative) if isinstance(relative, (str, os.PathLike)) else relative
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"workspace file path {text!r} is not a file's path; give a non-empty relative path")
    if Path(text).is_absolute():
        raise ConfigurationError(
            f"workspace file path {text!r} is absolute; give a path relative to the workspace root")
    if text.endswith((os.sep, "/")) or (os.altsep and text.endswith(os.altsep)):
        raise ConfigurationError(
            f"workspace file path {text!r} ends with a separator, so it names a directory; give a file's path")
    normal = os.path.normpath(text)
    if normal == ".":
        raise ConfigurationError(f"workspace file path {text!r} is the workspace root itself; give a file's path "
                                 "inside it")
    if normal == ".." or normal.startswith(".." + os.sep):
        raise ConfigurationError(f"workspace file path {text!r} escapes the workspace root through '..'")
    if root is None:
        return Path(normal)
    target = (root / text).resolve()
    if target == root or not target.is_relative_to(root):
        raise ConfigurationError(f"workspace file path {text!r} escapes the workspace root {str(root)!r} "
                                 "(through a symlink)")
    return target


class Workspace:
    """A directory where an executor's files are written and where validators run.

    ``Workspace()`` creates a fresh temporary directory that `close()` (or leaving the ``with``
    block, or garbage collection) removes. ``Workspace(path)`` uses the caller's directory, creating
    it if needed, and never deletes it.

    Paths given to `write` and `read` are relative to the root; absolute paths, paths that escape the
    root (``..``, or a symlink pointing outside) and paths of directories (``a/``, ``.``) raise
    `ConfigurationError`.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None):
        if path is None:
            self.path = Path(tempfile.mkdtemp(prefix="loops-ws-")).resolve()
            self.is_temporary = True
            # Removes the directory even if the owner forgets close(); silent, unlike
            # TemporaryDirectory's ResourceWarning.
            self._finalizer: weakref.finalize | None = weakref.finalize(
                self, shutil.rmtree, str(self.path), ignore_errors=True
            )
        else:
            self.path = Path(path).expanduser().resolve()
            if self.path.exists() and not self.path.is_dir():
                raise ConfigurationError(f"workspace path {str(self.path)!r} exists and is not a directory")
            self.path.mkdir(parents=True, exist_ok=True)
            self.is_temporary = False
            self._finalizer = None
        self.closed = False

    def resolve(self, relative: str | os.PathLike[str]) -> Path:
        """The absolute path of the file `relative` inside the workspace; raises `ConfigurationError` if it
        is not one (see `workspace_path`)."""
        return workspace_path(self.path, relative)

    def write(self, files: Mapping[str, str]) -> list[Path]:
        """Write each ``relative path -> text`` (UTF-8), creating parent directories.

        All files are written or none: each is first staged next to its target, and only when all are
        staged are they moved into place. A bad path (escaping the root, an existing directory, a
        parent that is a file) raises `ConfigurationError` and leaves the workspace as it was.
        Returns the absolute paths written, in the order given.
        """
        self._check_open()
        targets = {os.fspath(rel): (self.resolve(rel), text) for rel, text in files.items()}
        self._check_targets({rel: target for rel, (target, _) in targets.items()})
        staged: list[tuple[Path, Path]] = []
        created: list[Path] = []
        try:
            for target, text in targets.values():
                created += _make_parents(target.parent)
                staged.append((_stage(target, text), target))
        except BaseException:
            for temp, _ in staged:
                temp.unlink(missing_ok=True)
            for directory in reversed(created):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise
        for temp, target in staged:
            os.replace(temp, target)
            if target.suffix == ".py":
                # Python trusts a .pyc whose source has the same size and whole-second mtime, so a
                # file rewritten within a second could run its previous version's bytecode.
                for stale in target.parent.glob(f"__pycache__/{target.stem}.*.pyc"):
                    stale.unlink(missing_ok=True)
        return [target for target, _ in targets.values()]

    def _check_targets(self, targets: Mapping[str, Path]) -> None:
        """Refuse, before anything is staged, the names that could fail half-way through the moves."""
        wanted = {target: rel for rel, target in targets.items()}
        for rel, target in targets.items():
            if target.is_dir():
                raise ConfigurationError(
                    f"workspace file path {rel!r} is an existing directory; give the path of a file")
            for parent in target.parents:
                if parent == self.path:
                    break
                if parent in wanted:
                    raise ConfigurationError(
                        f"workspace file paths {wanted[parent]!r} and {rel!r} conflict: the first would have to be "
                        "both a file and the directory holding the second")
                if parent.exists() and not parent.is_dir():
                    raise ConfigurationError(
                        f"workspace file path {rel!r} cannot be written: "
                        f"{str(parent.relative_to(self.path))!r} is a file, not a directory")

    def read(self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> dict[str, str]:
        """Read the given relative paths; returns ``relative path -> text``.

        Missing files (and directories) are skipped rather than raising, because callers typically
        ask for the files an LM *says* it created, and some of them may not exist. Escaping paths
        still raise. Undecodable bytes are replaced, not fatal.
        """
        self._check_open()
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        found: dict[str, str] = {}
        for rel in paths:
            target = self.resolve(rel)
            if target.is_file():
                found[os.fspath(rel)] = target.read_text(encoding="utf-8", errors="replace")
        return found

    def close(self) -> None:
        """Remove the directory if it is temporary; a user directory is left alone. Idempotent."""
        self.closed = True
        if self._finalizer is not None:
            self._finalizer()

    def _check_open(self) -> None:
        if self.closed and self.is_temporary:
            raise ConfigurationError(f"workspace {str(self.path)!r} was closed and its directory removed")

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        kind = "temporary" if self.is_temporary else "user"
        return f"Workspace({str(self.path)!r}, {kind}{', closed' if self.closed else ''})"


def _make_parents(directory: Path) -> list[Path]:
    """Create `directory` and its missing parents; returns those created, outermost first."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir()
    return missing[::-1]


def _stage(target: Path, text: str) -> Path:
    """Write `text` to a new hidden file beside `target`, with the mode `target` has or would get."""
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.loops-tmp")
    # os.open applies the umask, as writing the target directly would (mkstemp would give 0600).
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        if target.exists():
            shutil.copymode(target, temp)  # an executable script stays executable
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp
