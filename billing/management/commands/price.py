"""``manage.py price set|list``: price versions of public models."""

from __future__ import annotations

from billing.management._cli import ServiceCommand, actor_from, add_actor_argument, decimal_arg
from billing.selectors.prices import price_list, prices_in_force
from billing.services.prices import price_set


class Command(ServiceCommand):
    help = "Set a public model's price ($ per million input/output tokens) or list prices."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        s = sub.add_parser("set", help="add a price version, in force from now")
        s.add_argument("public_model")
        s.add_argument("input_per_million", help="$ per million input tokens")
        s.add_argument("output_per_million", help="$ per million output tokens")
        s.add_argument("--note", default="")
        add_actor_argument(s)
        lst = sub.add_parser("list", help="prices in force (--all: every version)")
        lst.add_argument("--all", action="store_true")

    def handle_set(self, *, public_model, input_per_million, output_per_million, note, **options):
        price = price_set(
            public_model=public_model,
            input_per_million=decimal_arg(input_per_million, "input_per_million"),
            output_per_million=decimal_arg(output_per_million, "output_per_million"),
            note=note,
            actor=actor_from(options),
            source="cli",
        )
        self.stdout.write(
            f"{price.public_model}: ${price.input_per_million} in / ${price.output_per_million} out per M"
        )

    def handle_list(self, *, all, **options):  # noqa: A002 - the flag's name
        prices = (
            list(price_list()) if all else sorted(prices_in_force().values(), key=lambda p: p.public_model)
        )
        for p in prices:
            self.stdout.write(
                f"{p.public_model}\t{p.input_per_million}\t{p.output_per_million}\t{p.effective_from:%Y-%m-%d %H:%M}"
            )
