"""Runtime errors become each kind's API answers through one table."""

from __future__ import annotations

import pytest

from corral.actors.instances import Refusals, runtime_refusals
from corral.errors import ApiError
from corral.vm import (
    AgentUnavailable,
    InstanceNotFound,
    InstanceNotRunning,
    PathForbidden,
    RuntimeUnavailable,
)

COMPUTER = Refusals(
    not_running=ApiError(409, "COMPUTER_NOT_RUNNING", "computer is not running"),
    instance_gone=ApiError(500, "INTERNAL_ERROR", "the computer's instance is gone"),
)


def answer(refusals: Refusals, error: Exception) -> ApiError:
    with pytest.raises(ApiError) as raised, runtime_refusals(refusals):
        raise error
    assert raised.value.__cause__ is error
    return raised.value


@pytest.mark.parametrize(
    ("error", "sandbox", "computer"),
    [
        (InstanceNotRunning("x"), (409, "SANDBOX_NOT_RUNNING"), (409, "COMPUTER_NOT_RUNNING")),
        (RuntimeUnavailable("x"), (409, "SANDBOX_RUNTIME_UNAVAILABLE"), (409, "COMPUTER_NOT_RUNNING")),
        (InstanceNotFound("x"), (404, "NOT_FOUND"), (500, "INTERNAL_ERROR")),
        (AgentUnavailable("x"), (502, "AGENT_UNAVAILABLE"), (502, "AGENT_UNAVAILABLE")),
        (PathForbidden("x"), (403, "FORBIDDEN_PATH"), (403, "FORBIDDEN_PATH")),
    ],
)
def test_each_kind_words_not_running_and_gone_its_own_way(
    error: Exception, sandbox: tuple[int, str], computer: tuple[int, str]
) -> None:
    as_sandbox = answer(Refusals(), error)
    assert (as_sandbox.status, as_sandbox.code) == sandbox
    as_computer = answer(COMPUTER, error)
    assert (as_computer.status, as_computer.code) == computer
    if as_computer.status >= 500 and as_computer.code != "INTERNAL_ERROR":
        assert as_computer.message.startswith("runtime error: ")


def test_other_errors_pass_untouched() -> None:
    with pytest.raises(KeyError), runtime_refusals(COMPUTER):
        raise KeyError("not a runtime error")
