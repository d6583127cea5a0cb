"""Agent-run operations the HTTP layer calls: create (and wait), list, get, cancel, usage."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

import trio

from corral.actors import billing, sandboxes
from corral.errors import ApiError, missing_param, not_found, unauthorized, validation_error
from corral.ids import is_uuid, new_uuid
from corral.models import ABSOLUTE_PATH, Rule, model
from corral.net import gateway_address
from corral.storage import utc_now_iso

from . import store
from .actor import AgentRunActor, Cancel, Launch
from .artifacts import paths_problem
from .commands import PROVIDERS, builtin
from .profiles import resolve
from .services import AgentRunServices
from .signing import run_of_token, run_token
from .store import TERMINAL_EVENTS, AgentRunRecord
from .targets import Target, find_target

DEFAULT_CWD = "/workspace"
DEFAULT_TIMEOUT = 600
MAX_TIMEOUT = 3600
MAX_TEXT_BYTES = 100_000
"""Prompt and command: the prompt travels in the process's environment (`AGENT_PROMPT`),
which caps one variable at 128 KiB."""
MAX_LABEL = 200
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_TOKENS = 100_000_000
WAIT_GRACE = 15.0
"""Seconds past the timeout a waiting create gives the stop (SIGTERM, then SIGKILL) to end the run."""
USAGE_PATH = "/api/v1/agent-runs/usage"
FILTERS = ("target_id", "status", "agent_run_group_id", "parent_agent_run_id")

PUBLIC_FIELDS = (
    "id", "agent_run_group_id", "parent_agent_run_id", "orchestration_role", "target_kind", "target_id", "provider",
    "model", "prompt", "command", "cwd", "status", "exit_code", "output", "stderr", "metadata", "error",
    "agent_runtime_profile_id", "started_at", "finished_at", "created_at", "updated_at",
)


def run_public(run: AgentRunRecord) -> dict[str, Any]:
    public = {name: getattr(run, name) for name in PUBLIC_FIELDS}
    public["timeout"] = run.timeout_seconds
    public["output_truncated"] = bool(run.output_truncated)
    public["stderr_truncated"] = bool(run.stderr_truncated)
    return public


def _text_problem(value: str) -> str | None:
    return None if len(value.encode()) <= MAX_TEXT_BYTES else f"must be at most {MAX_TEXT_BYTES} bytes"


VARIABLE_NAME = r"[^=\x00]+"
"""An environment variable's name as the target's process sees it: not empty, no `=` or NUL."""


def _metadata_problem(metadata: dict[str, Any]) -> str | None:
    return paths_problem(metadata.get("artifact_paths"))


_TARGET = Rule(format="uuid", error=lambda _: ApiError(400, "INVALID_ID", "invalid target id"))
_TARGETS = ("target_id", "sandbox_id", "computer_id")


@model(schema={"anyOf": [{"required": [name], "properties": {name: {"type": "string"}}} for name in _TARGETS]})
class NewAgentRun:
    """An agent run (contract §14): `prompt` for the agent, `command` (or a provider's) run in the target."""

    prompt: Annotated[str, Rule(strip=False, check=_text_problem)]
    target_id: Annotated[str | None, _TARGET] = None
    target_kind: Literal["sandbox", "computer"] | None = None
    sandbox_id: Annotated[str | None, _TARGET] = None
    computer_id: Annotated[str | None, _TARGET] = None
    provider: Literal[PROVIDERS] | None = None  # type: ignore[valid-type]
    command: Annotated[str | None, Rule(strip=False, check=_text_problem)] = None
    model: Annotated[str | None, Rule(max_length=MAX_LABEL)] = None
    cwd: Annotated[str | None, Rule(pattern=ABSOLUTE_PATH, message="must be an absolute path")] = None
    timeout: Annotated[int | None, Rule(minimum=1, maximum=MAX_TIMEOUT, message=f"must be an integer from 1 to {MAX_TIMEOUT} seconds", schema={"default": DEFAULT_TIMEOUT})] = None
    env: Annotated[dict[str, str] | None, Rule(keys=VARIABLE_NAME, max_length=200, description="after the profile's")] = None
    agent_runtime_profile_id: str | None = None
    agent_profile_id: str | None = None
    agent_run_group_id: Annotated[str | None, Rule(max_length=MAX_LABEL)] = None
    parent_agent_run_id: Annotated[str | None, Rule(max_length=MAX_LABEL)] = None
    orchestration_role: Annotated[str | None, Rule(max_length=MAX_LABEL)] = None
    skip_agent_runtime_profile: bool = False
    metadata: Annotated[dict[str, Any] | None, Rule(check=_metadata_problem)] = None
    wait: Annotated[bool, Rule(description="answer with the final state (up to timeout); false: at once, running")] = True


async def _target(platform: AgentRunServices, tenant_id: str, new: NewAgentRun, key_workspace_id: str | None) -> Target:
    kind = new.target_kind
    target_id = new.target_id
    if new.sandbox_id:
        kind, target_id = kind or "sandbox", target_id or new.sandbox_id
    elif new.computer_id:
        kind, target_id = kind or "computer", target_id or new.computer_id
    if not target_id:
        raise missing_param("target_id")
    if not is_uuid(target_id):
        raise ApiError(400, "INVALID_ID", "invalid target id")
    target_id = target_id.lower()
    if kind is None:  # not said: whichever of the tenant's sandboxes and computers has that id
        kind = "sandbox" if await sandboxes.store.find(platform.db, tenant_id, target_id) is not None else "computer"
    try:
        return await find_target(platform, tenant_id, kind, target_id, key_workspace_id)
    except ApiError as exc:
        if exc.status == 404:
            raise not_found(f"{kind} not found", "COMPUTER_NOT_FOUND" if kind == "computer" else "NOT_FOUND") from exc
        raise


def usage_url(platform: AgentRunServices) -> str | None:
    """Where a run reports its AI usage: the API through the egress proxy on the bridge
    address (the one host address instances may reach), or None without the proxy."""
    if platform.egress_proxy is None:
        return None
    return f"http://{gateway_address(platform.settings.subnet)}:{platform.settings.egress_port}{USAGE_PATH}"


async def create_run(
    platform: AgentRunServices, tenant_id: str, user_id: str | None, new: NewAgentRun, key_workspace_id: str | None = None
) -> AgentRunRecord:
    target = await _target(platform, tenant_id, new, key_workspace_id)
    profile_id = new.agent_runtime_profile_id or new.agent_profile_id
    profile = await resolve(
        platform.run_profiles,
        tenant_id,
        target.workspace_id,
        target.kind,
        profile_id,
        new.skip_agent_runtime_profile,
        target_id=target.id,
    )
    provider = new.provider or ("custom" if new.command else None) or (profile.provider if profile else None)
    if provider is None:
        raise validation_error({"provider": "give a provider, or a command to run as provider custom"})
    if provider not in PROVIDERS:
        raise validation_error({"provider": f"must be one of {', '.join(PROVIDERS)}"})
    command = new.command or (profile.command if profile else None)
    cli: str | None = None
    if not command:
        line = builtin(provider)
        if line is None:
            # A profile may leave `command` out (contract §14); a custom run needs one from somewhere.
            raise validation_error(
                {"command": "is required for provider custom: give it in the run or in its agent runtime profile"},
                "command is required for provider custom",
            )
        cli, command = line
    model_name = new.model or (profile.model if profile else None)
    run_id = new_uuid()
    now = utc_now_iso()
    draft = AgentRunRecord(
        id=run_id, tenant_id=tenant_id, user_id=user_id, workspace_id=target.workspace_id,
        agent_run_group_id=new.agent_run_group_id, parent_agent_run_id=new.parent_agent_run_id,
        orchestration_role=new.orchestration_role, target_kind=target.kind, target_id=target.id, provider=provider,
        model=model_name, prompt=new.prompt, command=command, cwd=new.cwd or DEFAULT_CWD,
        timeout_seconds=new.timeout or DEFAULT_TIMEOUT, agent_runtime_profile_id=profile.id if profile is not None else profile_id, status="running",
        exit_code=None, output="", stderr="", output_truncated=0, stderr_truncated=0, error=None,
        metadata=dict(new.metadata or {}), started_at=now, finished_at=None, created_at=now, updated_at=now,
    )
    env = {
        **(profile.env if profile else {}),
        **(new.env or {}),
        "AGENT_PROMPT": new.prompt,
        "AGENT_MODEL": model_name or "",
        "AGENT_RUN_ID": run_id,
        "CORRAL_RUN_TOKEN": run_token(platform.jwt_secret, run_id),
    }
    url = usage_url(platform)
    if url is not None:
        env["CORRAL_USAGE_URL"] = url
    with platform.bus.subscribe(resource_type="agent_run", resource_id=run_id, types=[f"agent_run.{t}" for t in TERMINAL_EVENTS]) as ended:
        ref = await platform.system.create(AgentRunActor, run_id, draft)
        record: AgentRunRecord = await ref.ask(Launch(env=env, cli=cli), timeout=120)
        if not new.wait or record.terminal:
            return record
        with trio.move_on_after(draft.timeout_seconds + WAIT_GRACE):
            await ended.receive()
    final = await store.load(platform.db, run_id)
    assert final is not None
    return final


async def find_run(platform: AgentRunServices, tenant_id: str, run_id: str) -> AgentRunRecord:
    run = await store.find(platform.db, tenant_id, run_id.lower()) if is_uuid(run_id) else None
    if run is None:
        raise not_found("agent run not found", "AGENT_RUN_NOT_FOUND")
    return run


def _cursor(run: AgentRunRecord) -> str:
    return base64.urlsafe_b64encode(f"{run.created_at}|{run.id}".encode()).decode().rstrip("=")


def _parse_cursor(cursor: str) -> tuple[str, str]:
    try:
        created_at, _, run_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().partition("|")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        created_at, run_id = "", ""
    if not created_at or not run_id:
        raise ApiError(400, "INVALID_PARAM", "cursor is not a next_cursor of this list")
    return created_at, run_id


async def list_runs(
    platform: AgentRunServices, tenant_id: str, filters: dict[str, str], limit: int, cursor: str | None
) -> tuple[list[AgentRunRecord], str | None]:
    before = _parse_cursor(cursor) if cursor else None
    rows = await store.page(platform.db, tenant_id, filters, limit=limit + 1, before=before)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (_cursor(rows[-1]) if more and rows else None)


async def cancel_run(platform: AgentRunServices, run: AgentRunRecord) -> AgentRunRecord:
    """Stop the process and mark the run canceled; a finished run is 409 INVALID_STATE."""
    if run.terminal:
        raise ApiError(409, "INVALID_STATE", "agent run is already finished")
    ref = await platform.system.get(AgentRunActor, run.id)
    result: AgentRunRecord = await ref.ask(Cancel(), timeout=30)
    return result


async def resume_runs(platform: AgentRunServices) -> int:
    """At start-up: activate the actor of every running run whose target this node hosts,
    so it follows its process again (another node's runs are its own to follow: here the
    target's actor is refused, and the run would end `failed`)."""
    running = await store.running_ids_followed_by(platform.db, platform.settings.node_name)
    for run_id in running:
        try:
            await platform.system.get(AgentRunActor, run_id)
        except ApiError:
            continue
    return len(running)


@model
class UsageReport:
    """AI usage a run reports from inside its target (`CORRAL_USAGE_URL`)."""

    provider: Annotated[str, Rule(max_length=MAX_LABEL)]
    model: Annotated[str, Rule(max_length=MAX_LABEL)]
    input_tokens: Annotated[int, Rule(minimum=0, maximum=MAX_TOKENS, message=f"must be an integer from 0 to {MAX_TOKENS}")]
    output_tokens: Annotated[int, Rule(minimum=0, maximum=MAX_TOKENS, message=f"must be an integer from 0 to {MAX_TOKENS}")]


async def run_of_bearer(platform: AgentRunServices, authorization: str | None) -> AgentRunRecord:
    """The run whose `CORRAL_RUN_TOKEN` is presented; 401 otherwise."""
    scheme, _, token = (authorization or "").partition(" ")
    run_id = run_of_token(platform.jwt_secret, token.strip()) if scheme.lower() == "bearer" else None
    run = await store.load(platform.db, run_id) if run_id else None
    if run is None:
        raise unauthorized("invalid or missing run token")
    return run


async def record_usage(platform: AgentRunServices, run: AgentRunRecord, report: UsageReport) -> billing.TransactionRecord:
    """Charge the run's tenant for the tokens by the AI prices, as a `spend` row."""
    if run.terminal:
        raise ApiError(409, "INVALID_STATE", "agent run is not running")
    return await billing.record_ai_usage(
        platform,
        tenant_id=run.tenant_id,
        provider=report.provider,
        model=report.model,
        input_tokens=report.input_tokens,
        output_tokens=report.output_tokens,
        user_id=run.user_id,
        computer_id=run.target_id if run.target_kind == "computer" else None,
        resource_type="agent_run",
        resource_id=run.id,
    )
