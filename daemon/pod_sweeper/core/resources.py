"""Finds the ``sql/`` and ``migrations/`` folders, inside the installed wheel or in a source checkout.

The wheel carries both folders inside the package (pyproject's force-include); a source checkout or an
editable install keeps them at the top of the repository, where DBAs and reviewers read them.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # pod_sweeper/, above core/


@cache
def resource_dir(name: str) -> Path:
    """The folder ``name`` (``sql`` or ``migrations``) that ships with this copy of pod-sweeper."""
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"pod-sweeper is installed without its {name}/ folder")
