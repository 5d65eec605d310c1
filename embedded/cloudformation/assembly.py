"""Read a stage's stacks from a CDK cloud assembly: templates, stack names, order, construct paths."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StackTemplate:
    """One synthesized stack: its deployed name, its part (``Storage``...), its template."""

    stack_name: str
    part: str
    template: dict[str, Any]
    #: construct path below the stack (``SessionsTable/Resource``) -> logical id
    paths: dict[str, str] = field(default_factory=dict)

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        resources: dict[str, dict[str, Any]] = self.template.get("Resources", {})
        return resources

    def logical_id(self, path: str) -> str:
        """The logical id of the resource at construct path ``path`` (below the stack)."""
        key = path.strip("/")
        if key in self.paths:
            return self.paths[key]
        if f"{key}/Resource" in self.paths:
            return self.paths[f"{key}/Resource"]
        raise KeyError(f"{self.stack_name}: no resource at construct path {path!r}; known: {sorted(self.paths)}")

    def path_of(self, logical_id: str) -> str | None:
        for path, lid in self.paths.items():
            if lid == logical_id:
                return path
        return None


def _metadata(artifact: dict[str, Any], assembly_dir: Path) -> dict[str, Any]:
    metadata: dict[str, Any] = dict(artifact.get("metadata") or {})
    extra = artifact.get("additionalMetadataFile")
    if extra:
        metadata.update(json.loads((assembly_dir / extra).read_text()))
    return metadata


def load_assembly(assembly_dir: Path) -> list[StackTemplate]:
    """Every CloudFormation stack of the assembly, dependencies first (as ``cdk deploy`` orders them)."""
    manifest = json.loads((assembly_dir / "manifest.json").read_text())
    artifacts: dict[str, dict[str, Any]] = manifest["artifacts"]
    stacks = {aid: a for aid, a in artifacts.items() if a.get("type") == "aws:cloudformation:stack"}
    ordered: list[str] = []

    def visit(aid: str, seen: tuple[str, ...] = ()) -> None:
        if aid in ordered or aid not in stacks:
            return
        if aid in seen:
            raise ValueError(f"cyclic stack dependencies: {' -> '.join((*seen, aid))}")
        for dep in stacks[aid].get("dependencies", []):
            visit(dep, (*seen, aid))
        ordered.append(aid)

    for aid in stacks:
        visit(aid)
    result = []
    for aid in ordered:
        artifact = stacks[aid]
        props = artifact["properties"]
        display = str(artifact.get("displayName", aid))
        prefix = "/" + display.rstrip("/") + "/"
        paths: dict[str, str] = {}
        for path, entries in _metadata(artifact, assembly_dir).items():
            for entry in entries:
                if entry.get("type") == "aws:cdk:logicalId" and path.startswith(prefix):
                    paths[path[len(prefix) :]] = str(entry["data"])
        template = json.loads((assembly_dir / props["templateFile"]).read_text())
        result.append(StackTemplate(str(props.get("stackName", aid)), display.rsplit("/", 1)[-1], template, paths))
    return result
