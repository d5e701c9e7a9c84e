"""The product's bytecode is there before the suite's processes start (tests/bytecode.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.bytecode import PACKAGES, ROOT


def test_every_module_of_the_product_has_its_bytecode() -> None:
    missing = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if not Path(importlib.util.cache_from_source(str(path))).exists()
    ]
    assert missing == []
