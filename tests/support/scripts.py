"""The repository's standalone scripts (``scripts/`` is not a package), imported as modules."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.launch import REPO_ROOT


def load_script(name: str) -> ModuleType:
    """Imports ``scripts/<name>.py`` afresh as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being created
    spec.loader.exec_module(module)
    return module
