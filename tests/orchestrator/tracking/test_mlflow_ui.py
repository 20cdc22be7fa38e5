"""Which console errors of MLflow's web UI the smoke test excuses (mlflow_ui._unexpected_errors)."""

from __future__ import annotations

import pytest

from tests.browser import ConsoleError, PageLog
from tests.orchestrator.tracking.mlflow_ui import ASSISTANT_PROBES, USER_PROBE, _unexpected_errors

ORIGIN = "http://127.0.0.1:5000"


def _status(code: int) -> str:
    return f"Failed to load resource: the server responded with a status of {code} (X)"


def test_mlflows_own_probes_are_excused_and_nothing_else_of_the_origin() -> None:
    log = PageLog(
        console_errors=[
            ConsoleError(_status(404), ORIGIN + USER_PROBE),
            ConsoleError(_status(500), ORIGIN + ASSISTANT_PROBES + "config"),
            ConsoleError(
                "Failed to load resource: net::ERR_NAME_NOT_RESOLVED", "https://mlflow.org/x"
            ),
        ]
    )
    with pytest.warns(UserWarning, match="assistant panel"):
        assert _unexpected_errors(log, ORIGIN) == []


@pytest.mark.parametrize(
    "error",
    [
        ConsoleError(_status(500), ORIGIN + "/ajax-api/2.0/mlflow/runs/search"),
        ConsoleError(_status(500), ORIGIN + USER_PROBE),  # only its 404 is expected
        ConsoleError(_status(403), ORIGIN + ASSISTANT_PROBES + "config"),
        ConsoleError("Failed to load resource: net::ERR_CONNECTION_REFUSED", ORIGIN + "/x"),
        ConsoleError("TypeError: x is undefined", ""),
    ],
)
def test_any_other_error_fails_the_page(error: ConsoleError) -> None:
    assert _unexpected_errors(PageLog(console_errors=[error]), ORIGIN) == [str(error)]
