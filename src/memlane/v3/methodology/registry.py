"""The built-in methodology plugins by id. Settings name one of these ids; nothing else is
accepted (a setting never loads or runs code)."""

from __future__ import annotations

from memlane.errors import ValidationError
from memlane.v3.methodology.bmad import BmadPlugin
from memlane.v3.methodology.native import NativePlugin
from memlane.v3.methodology.plugin import MethodologyPlugin

#: id -> the plugin (stateless: one instance serves every project).
PLUGINS: dict[str, MethodologyPlugin] = {p.id: p for p in (NativePlugin(), BmadPlugin())}
#: The ids, for settings validation.
PLUGIN_IDS: tuple[str, ...] = tuple(PLUGINS)
#: The methodology of a project the settings do not name.
DEFAULT_METHODOLOGY = "native"


def get_plugin(name: str) -> MethodologyPlugin:
    """The built-in plugin ``name``.

    Raises:
        ValidationError: no built-in plugin has that id (the message lists them).
    """
    plugin = PLUGINS.get(name) if isinstance(name, str) else None
    if plugin is None:
        raise ValidationError(f"methodology: must be one of {', '.join(PLUGIN_IDS)}", details={"field": "methodology"})
    return plugin
