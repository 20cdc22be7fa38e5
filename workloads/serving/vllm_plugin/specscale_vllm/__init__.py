"""vLLM plugin: registers :data:`ARCHITECTURE` (this project's Scylla/EAGLE draft) with vLLM.

vLLM calls :func:`register` in every process it starts (entry point ``vllm.general_plugins``),
so ``--speculative-config '{"method": "eagle", "model": <export>}'`` finds the class named in
the export's ``config.json``. Imports of vLLM stay inside :func:`register`.
"""

ARCHITECTURE = "EagleScyllaLlamaForCausalLM"
"""``architectures[0]`` of a ``--format vllm`` export that stock EAGLE-1 cannot hold"""


def register() -> None:
    """Register the drafter class lazily (vLLM imports it only when a config names it)."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "specscale_vllm.scylla_eagle:" + ARCHITECTURE)
