"""vLLM plugin: registers :data:`ARCHITECTURE` (this project's Scylla/EAGLE draft) with vLLM.

vLLM calls :func:`register` in every process it starts (entry point ``vllm.general_plugins``),
so ``--speculative-config '{"method": "eagle", "model": <export>}'`` finds the class named in
the export's ``config.json``. Imports of vLLM stay inside :func:`register`.
"""

ARCHITECTURE = "EagleScyllaLlamaForCausalLM"
"""``architectures[0]`` of a ``--format vllm`` export that stock EAGLE-1 cannot hold"""

FUSED_ARCHITECTURE = "Eagle3ScyllaLlamaForCausalLM"
"""``architectures[0]`` of a ``--format vllm`` export of a draft with hidden fusion
(``method: eagle3``)"""


def register() -> None:
    """Register the drafter class lazily (vLLM imports it only when a config names it)."""
    from vllm import ModelRegistry

    for arch in (ARCHITECTURE, FUSED_ARCHITECTURE):
        if arch not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(arch, "specscale_vllm.scylla_eagle:" + arch)
