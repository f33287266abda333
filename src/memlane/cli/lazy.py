"""Command groups defined outside the ``memlane`` package, imported when one of their commands is used.

``memlane bench ...`` and ``memlane replay ...`` are defined by the ``benchmarks`` package, which
lives beside memlane's sources and is installed by ``make install``. :func:`lazy_typer` gives the
command line a group whose commands are those of such a Typer app, imported only when the group
lists its commands, shows help or runs one (the rest of the command line never imports it). When
the package is not installed, every command of the group says so and how to install it, and exits 2.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperGroup

#: How to get the benchmarks package (printed when it is missing).
INSTALL_HINT = (
    "this command needs memlane's benchmarks (the memlane-benchmarks distribution), which "
    "are not installed: they live beside the sources (benchmarks/ in a memlane checkout); "
    "`make install` there installs them with memlane, or `pip install -e ./benchmarks`"
)


class LazyGroup(TyperGroup):
    """A click group delegating to the Typer app ``target`` = ``(module, attribute)``, imported on
    first use. Subclasses set ``target`` (:func:`lazy_typer`)."""

    target: tuple[str, str] = ("", "")

    def _loaded(self) -> TyperGroup | None:
        """The target's click group, or None when its top-level package is not installed.

        Raises:
            ModuleNotFoundError: the package is there but one of its own imports is missing.
        """
        cached = getattr(self, "_group", None)
        if cached is not None:
            return cached
        module, attr = self.target
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module.split(".")[0]:
                return None
            raise
        group = typer.main.get_group(getattr(mod, attr))
        self._group = group
        return group

    def list_commands(self, ctx: Any) -> list[str]:
        group = self._loaded()
        return group.list_commands(ctx) if group is not None else []

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        group = self._loaded()
        if group is None:
            return _missing_command(cmd_name)
        return group.get_command(ctx, cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super().format_help(ctx, formatter)
        if self._loaded() is None:
            typer.echo(f"\n{INSTALL_HINT}.")


def _missing_command(name: str) -> Any:
    """A command ``name`` that takes any arguments and fails with :data:`INSTALL_HINT` (exit code 2)."""
    app = typer.Typer()

    @app.command(
        name, add_help_option=False, context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
    )
    def fail(ctx: typer.Context) -> None:
        typer.echo(f"error: {ctx.command_path}: {INSTALL_HINT}.", err=True)
        raise typer.Exit(2)

    return typer.main.get_command(app)


def lazy_typer(module: str, attr: str, *, help: str) -> typer.Typer:
    """A Typer group (for ``app.add_typer``) whose commands are those of the Typer app
    ``module.attr``, imported on first use (:class:`LazyGroup`)."""
    group_cls = type(f"Lazy_{attr}", (LazyGroup,), {"target": (module, attr)})
    return typer.Typer(cls=group_cls, help=help, no_args_is_help=True, rich_markup_mode="markdown")
