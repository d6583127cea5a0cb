"""The one exec-timeout rule of every instance kind."""

from __future__ import annotations

import pytest

from corral.actors.instances import clamp_timeout
from corral.errors import ApiError


def test_default_maximum_clamp_and_a_floor_of_one_second() -> None:
    assert clamp_timeout(None) == 30
    assert clamp_timeout(300) == 300
    assert clamp_timeout(301) == 300
    assert clamp_timeout(0.5) == 1  # never 0, which the agent would read as "the default"
    for bad in (0, -1, "30", True):
        with pytest.raises(ApiError) as refused:
            clamp_timeout(bad)
        assert refused.value.status == 422
