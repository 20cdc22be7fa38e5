"""The project's exception family: user mistakes raise a subclass of :class:`OrchestratorError`.

The CLI turns any of these into one line on stderr and exit code 2.
"""


class OrchestratorError(Exception):
    """Base class of every error caused by user input or the environment."""


class SpecError(OrchestratorError):
    """A sweep YAML is missing, malformed or invalid; the message names file:line and a fix."""


class StoreError(OrchestratorError):
    """The results database cannot be reached or a write failed."""


class NoResultsTables(StoreError):
    """A database opened read-only holds none of this project's tables (no sweep yet)."""


class TrackingError(OrchestratorError):
    """The MLflow tracking server cannot be reached or refused a write."""
