"""The one table from runtime and network errors to API answers."""

from __future__ import annotations

import inspect

from corral.actors.runtime_errors import ANSWERS, answer_for, api_error_for
from corral.net import errors as net_errors
from corral.vm import errors as vm_errors


def test_every_runtime_and_network_error_has_its_own_answer() -> None:
    for module in (vm_errors, net_errors):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Exception) and cls.__module__ == module.__name__ and cls is not vm_errors.AgentError:
                assert cls in ANSWERS, f"{cls.__name__} has no answer"


def test_answers_and_messages() -> None:
    assert answer_for(vm_errors.AgentUnavailable("x")) == (502, "AGENT_UNAVAILABLE")
    assert answer_for(vm_errors.AgentError("busy", "PROCESS_NOT_RUNNING", 409)) == (409, "PROCESS_NOT_RUNNING")
    assert answer_for(net_errors.AddressExhausted("full")) == (503, "SERVICE_UNAVAILABLE")
    forbidden = api_error_for(vm_errors.PathForbidden("/etc is not allowed"))
    assert (forbidden.status, forbidden.code, forbidden.message) == (403, "FORBIDDEN_PATH", "/etc is not allowed")
    launch = api_error_for(vm_errors.LaunchFailed("no agent"))
    assert (launch.status, launch.message) == (500, "runtime error: no agent")
