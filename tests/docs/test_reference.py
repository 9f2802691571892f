"""The API reference documents exactly the public names (``lockgate.__all__``)."""

from __future__ import annotations

import re

import lockgate

from .conftest import ROOT

API = ROOT / "docs" / "reference" / "api.md"


def test_api_reference_lists_every_public_name() -> None:
    documented = re.findall(r"^::: lockgate\.(\w+)\s*$", API.read_text(), re.MULTILINE)
    public = set(lockgate.__all__)
    assert len(documented) == len(set(documented)), "a name is documented twice"
    assert not public - set(documented), f"public but not in {API.name}"
    modules = {"postgres", "embedded", "errors"}
    assert not set(documented) - public - modules, f"in {API.name} but not public"
