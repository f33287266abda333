"""Which project a working directory belongs to, and which work tree (docs/v3.md, "Project identity").

Two answers, both absolute path strings:

* :func:`work_tree_root`: the nearest ancestor of a directory (itself included) holding a ``.git``
  entry (a directory in an ordinary clone, a file in a linked worktree or a submodule), else the
  directory itself. Files are named relative to it.
* :func:`project_root`: the project's identity. For a linked worktree (``git worktree add``) it is
  the repository's main work tree, so every worktree of one repository is one project; otherwise
  it is :func:`work_tree_root`.

The worktree is recognised from git's own files (gitrepository-layout(5)): a linked worktree's
``.git`` is a file ``gitdir: <repo>/.git/worktrees/<name>``, and that directory's ``commondir``
file names the repository's common directory (relative to it), which is what
``git rev-parse --git-common-dir`` prints. Reading two small files instead of running git keeps
the hook process free of a subprocess (a PreToolUse hook holds the agent's tool call) and works
without git installed. A submodule's ``.git`` file points to a directory without ``commondir``:
it stays a project of its own. Anything unreadable falls back to the work tree root.
"""

from __future__ import annotations

import os

#: Largest ``.git`` / ``commondir`` file read, bytes (git writes one line).
MAX_POINTER_BYTES = 4096


def _read_line(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_POINTER_BYTES)
    except OSError:
        return None
    text = data.decode("utf-8", "replace").strip()
    return text.splitlines()[0].strip() if text else None


def _abs(path: str | os.PathLike[str]) -> str:
    start = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        return os.path.realpath(start)
    except OSError:
        return start


def work_tree_root(cwd: str | os.PathLike[str], *, resolve: bool = True) -> str:
    """The nearest ancestor of ``cwd`` (itself included) holding a ``.git`` entry, else ``cwd``.

    Args:
        cwd: a directory (need not exist: then it is its own root).
        resolve: resolve symbolic links first (True); False keeps the path as given, normalised,
            so that paths the agent wrote under it still compare as prefixes.

    Returns:
        an absolute path string.
    """
    start = _abs(cwd) if resolve else os.path.normpath(os.path.abspath(os.path.expanduser(os.fspath(cwd))))
    candidate = start
    while True:
        if os.path.exists(os.path.join(candidate, ".git")):  # False for any OSError
            return candidate
        parent = os.path.dirname(candidate)
        if parent == candidate:
            return start
        candidate = parent


def common_dir(root: str) -> str | None:
    """The repository's common directory when ``root`` is a linked worktree's top level (its
    ``.git`` is a ``gitdir:`` file whose directory has a ``commondir``), else None."""
    dot_git = os.path.join(root, ".git")
    if not os.path.isfile(dot_git):
        return None
    line = _read_line(dot_git)
    if line is None or not line.startswith("gitdir:"):
        return None
    gitdir = line[len("gitdir:") :].strip()
    if not gitdir:
        return None
    gitdir = os.path.normpath(os.path.join(root, gitdir))
    common = _read_line(os.path.join(gitdir, "commondir"))
    if not common:
        return None
    return os.path.normpath(os.path.join(gitdir, common))


def project_root(cwd: str | os.PathLike[str]) -> str:
    """The project a directory belongs to: a linked worktree's main work tree (the parent of the
    common ``.git`` directory; a bare repository's worktrees: the repository directory), else
    :func:`work_tree_root`. An absolute path string, symbolic links resolved."""
    root = work_tree_root(cwd)
    common = common_dir(root)
    if common is None:
        return root
    common = _abs(common)
    main = os.path.dirname(common) if os.path.basename(common) == ".git" else common
    return main if os.path.isdir(main) else root
