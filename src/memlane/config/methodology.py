"""Which methodology plugin each project uses (seed memory-system-v3-design.md section 3 "How
the Plugin is Used"). Only the ids of the built-in plugins are accepted
(:mod:`memlane.v3.methodology.registry` holds the plugins): a setting never names code to load."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The built-in plugin ids (the registry checks that its plugins are exactly these).
MethodologyId = Literal["native", "bmad"]


class ProjectMethodology(BaseModel):
    """One project's methodology."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(
        ..., min_length=1, max_length=4096, description="The project as memlane names it (the hooks send the git root)."
    )
    methodology: MethodologyId = Field(..., description="native | bmad")


class MethodologySettings(BaseModel):
    """Methodology per project; applied at once when changed over ``POST /api/config``."""

    model_config = ConfigDict(extra="forbid")

    default: MethodologyId = Field(
        "native",
        description="Methodology of a project not listed in `projects`: native (spec / subtask) or "
        "bmad (epic / story / task).",
    )
    projects: list[ProjectMethodology] = Field(
        default_factory=list,
        max_length=10_000,
        description="Per-project methodology: a list of {project, methodology} (a list, not a mapping, so that "
        "project names keep their spelling).",
    )

    @field_validator("projects")
    @classmethod
    def _unique(cls, v: list[ProjectMethodology]) -> list[ProjectMethodology]:
        seen: set[str] = set()
        for p in v:
            if p.project in seen:
                raise ValueError(f"project {p.project!r} listed twice")
            seen.add(p.project)
        return v

    def for_project(self, project: str | None) -> str:
        """The methodology id of ``project`` (``default`` for None or an unlisted project)."""
        if project is not None:
            for p in self.projects:
                if p.project == project:
                    return p.methodology
        return self.default
