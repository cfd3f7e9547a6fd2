"""An import-linter contract type: an app names the modules others may import; the rest is private.

import-linter's ``protected`` contract is a deny-list: it guards the modules it names, so a module
added later (``evaluations.pricing``, ``deployments.costs``) is open to every importer until someone
remembers to list it. This contract inverts the list. For one package it names what is public, and
every other module of the package is private: importing it from outside the package breaks the
contract, whatever its name and however new it is (ADR 0026).

A module is public when

- its path inside the package passes through one of ``public_names`` (``selectors``, ``services``):
  ``billing.selectors``, ``billing.selectors.costs`` and ``deployments.rollouts.services`` alike, so
  an app cut by concept keeps one rule; or
- it is, or sits below, one of ``public_modules``, named in full (``catalog.constants``). Each must
  exist: a list that names a module which is gone breaks the contract instead of going stale.

The package itself (its ``__init__``) is private like any other module. Importers inside the package
and in ``allowed_importers`` may import anything of it. Only the code in ``root_packages`` is
checked, so the tests (not a root package) may import anything.

Configuration (pyproject.toml)::

    [tool.importlinter]
    contract_types = ["public_modules: core.contracts.PublicModulesContract"]

    [[tool.importlinter.contracts]]
    name = "Other code imports catalog only through its public modules"
    type = "public_modules"
    package = "catalog"
    public_names = ["selectors", "services"]
    public_modules = ["catalog.constants"]
    allowed_importers = ["benchmarks"]

This module is read by ``lint-imports`` only; it imports import-linter and nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from importlinter import Contract, ContractCheck, fields, output


@dataclass
class _PrivateImport:
    importer: str
    imported: str
    line_numbers: tuple[int, ...]


@dataclass
class _Findings:
    private_imports: list[_PrivateImport] = field(default_factory=list)
    missing_public_modules: list[str] = field(default_factory=list)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


class PublicModulesContract(Contract):
    """Modules outside ``package`` import only its public modules (see the module docstring)."""

    type_name = "public_modules"

    package = fields.ModuleField()
    public_names = fields.ListField(subfield=fields.StringField())
    public_modules = fields.ListField(subfield=fields.ModuleField(), required=False, default=[])
    allowed_importers = fields.ListField(subfield=fields.ModuleField(), required=False, default=[])

    def is_public(self, module: str) -> bool:
        """Whether ``module`` (inside ``package``) is one that other code may import."""
        package = self.package.name
        inside = module[len(package) + 1 :].split(".") if module != package else []
        if any(part in self.public_names for part in inside):
            return True
        return any(_within(module, public.name) for public in self.public_modules)

    def check(self, graph, verbose: bool) -> ContractCheck:
        package = self.package.name
        findings = _Findings()
        warnings: list[str] = []
        if package not in graph.modules:
            findings.missing_public_modules.append(package)
            return ContractCheck(kept=False, metadata={"findings": findings})
        members = {package} | graph.find_descendants(package)
        findings.missing_public_modules = sorted(m.name for m in self.public_modules if m.name not in members)
        for name in self.public_names:
            if not any(name in m[len(package) + 1 :].split(".") for m in members if m != package):
                warnings.append(f"{package}: no module is named {name!r}, so the public name matches nothing")
        allowed = [package, *(m.name for m in self.allowed_importers)]

        for module in sorted(members):
            if self.is_public(module):
                continue
            for importer in sorted(graph.find_modules_that_directly_import(module)):
                if any(_within(importer, a) for a in allowed):
                    continue
                details = graph.get_import_details(importer=importer, imported=module)
                lines = tuple(sorted({d["line_number"] for d in details}))
                findings.private_imports.append(_PrivateImport(importer, module, lines))
            output.verbose_print(verbose, f"{module}: private")

        kept = not findings.private_imports and not findings.missing_public_modules
        return ContractCheck(kept=kept, warnings=warnings, metadata={"findings": findings})

    def render_broken_contract(self, check: ContractCheck) -> None:
        findings: _Findings = check.metadata["findings"]
        package = self.package.name
        public = [*self.public_names, *(m.name for m in self.public_modules)]
        for missing in findings.missing_public_modules:
            output.print_error(f"{missing} is listed as public but does not exist.", bold=False)
            output.new_line()
        if findings.private_imports:
            output.print_error(
                f"Imports of modules private to {package} (public: {', '.join(public)}):", bold=False
            )
            output.new_line()
            for found in findings.private_imports:
                lines = ", ".join(map(str, found.line_numbers))
                output.print_error(f"- {found.importer} -> {found.imported} (l.{lines})", bold=False)
                output.new_line()
            output.print(
                f"Go through the selectors or services of {package} instead; or, if other apps are "
                "meant to import the module, list it in this contract's public_modules and say why "
                "(ADR 0026).",
            )
            output.new_line()
