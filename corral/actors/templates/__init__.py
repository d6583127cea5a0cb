"""Sandbox templates and their builds (contract §15).

`service` holds the operations the HTTP layer calls; `BuildActor` is a build (a kind
of the instance base); `TemplateResolver` answers sandbox creation and expose.
"""

from .build_actor import BuildActor
from .cleanup import hear_deletions, remove_files_if_unused, sweep_forever, sweep_unused_files
from .messages import Cancel
from .resolver import TemplateResolver
from .service import (
    BUILD_SIZE,
    BUILTINS,
    Builtin,
    NewTemplate,
    StatusChange,
    build_logs,
    build_public,
    cancel_build,
    create_template,
    delete_template,
    find_build,
    find_template,
    follow_build,
    latest_build,
    list_templates,
    rebuild,
    recover_interrupted,
    retry_build,
    template_public,
)
from .services import TemplateServices
from .store import BuildRecord, LogLine, TemplateRecord

ACTORS = (BuildActor,)

__all__ = [
    "ACTORS",
    "BUILD_SIZE",
    "BUILTINS",
    "BuildActor",
    "BuildRecord",
    "Builtin",
    "Cancel",
    "LogLine",
    "NewTemplate",
    "StatusChange",
    "TemplateRecord",
    "TemplateResolver",
    "TemplateServices",
    "build_logs",
    "build_public",
    "cancel_build",
    "create_template",
    "delete_template",
    "find_build",
    "find_template",
    "follow_build",
    "hear_deletions",
    "latest_build",
    "list_templates",
    "rebuild",
    "recover_interrupted",
    "remove_files_if_unused",
    "retry_build",
    "sweep_forever",
    "sweep_unused_files",
    "template_public",
]
