"""The ``--smoke`` mode every benchmark has: the same code path at tiny sizes, in seconds.

The test suite runs each benchmark this way and checks the keys of the JSON it writes, so a change
that breaks a benchmark breaks CI. Figures from a smoke run mean nothing and say so (``"smoke": true``).
"""

from __future__ import annotations

import argparse


def add_smoke_flag(parser: argparse.ArgumentParser, **tiny: object) -> None:
    """``--smoke`` replaces the named arguments' values with ``tiny`` ones (see ``apply_smoke``)."""
    sizes = ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in tiny.items())
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"seconds-long run at tiny sizes ({sizes}) that the tests run; its figures mean nothing",
    )
    parser.set_defaults(smoke_sizes=tiny)


def apply_smoke(args: argparse.Namespace) -> argparse.Namespace:
    if args.smoke:
        for name, value in args.smoke_sizes.items():
            setattr(args, name, value)
    return args
