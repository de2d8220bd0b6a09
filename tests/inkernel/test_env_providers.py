"""The environment capture's distribution lookup (:func:`jupyter_exec.inkernel.env.providers`).

It stands in for ``importlib.metadata.packages_distributions()`` on a cell's new names:
whatever it answers must be what that function answers, for every name this venv has.
"""

from __future__ import annotations

from importlib import metadata

import pytest

from jupyter_exec.inkernel import env


def _as_sets(mapping: dict[str, list[str]]) -> dict[str, set[str]]:
    return {name: set(dists) for name, dists in mapping.items()}


def test_every_installed_name_maps_as_packages_distributions_maps_it() -> None:
    everything = metadata.packages_distributions()
    names = set(everything) | {"no_such_module_anywhere", "mymodule"}
    assert _as_sets(env.providers(names)) == _as_sets({n: list(d) for n, d in everything.items()})


def test_a_cells_few_names_read_only_the_metadata_of_their_distributions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cell after ``import matplotlib`` paid for every distribution's metadata and file
    list (0.4 to 0.8 s); a few names read the metadata of their own distributions only."""
    few = ["six", "packaging", "pytest", "no_such_module_anywhere"]
    full = metadata.packages_distributions()
    read: list[str] = []
    plain = metadata.PathDistribution.read_text

    def counted(self: metadata.PathDistribution, filename: str) -> str | None:
        if filename in ("METADATA", "PKG-INFO"):
            read.append(filename)
        return plain(self, filename)

    monkeypatch.setattr(metadata.PathDistribution, "read_text", counted)
    found = env.providers(few)
    assert _as_sets(found) == {n: set(full[n]) for n in few if n in full}
    assert "six" in found
    assert "pytest" in found
    assert len(read) == len({d for n in found for d in found[n]})
    assert len(list(metadata.distributions())) > 3 * len(read)
