"""Writes the CycloneDX bill of materials of the Python environment that runs it (the image's
/opt/pod-sweeper, at build time: deploy/Containerfile runs it last, so it lists exactly what the image
holds). One component per installed distribution, with its version, its package URL and its licence as
the distribution declares it (a PEP 639 License-Expression, else a short License field, else its
licence classifiers); the dependencies between them from their Requires-Dist. Standard library only: it runs
in the image's own interpreter before anything else is there.

The output is deterministic: the serial number is derived from the components, and the timestamp is
SOURCE_DATE_EPOCH's when that is set (none otherwise), so the same environment gives the same file.

    python deploy/sbom.py > sbom.cdx.json
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

ROOT_NAME = "pod-sweeper"
# Trove licence classifiers and the SPDX identifier each one names unambiguously ("BSD License" does not
# say which BSD licence, so it stays a name).
CLASSIFIERS = {
    "Apache Software License": "Apache-2.0",
    "MIT License": "MIT",
    "ISC License (ISCL)": "ISC",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0-only",
    "GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "Python Software Foundation License": "PSF-2.0",
    "The Unlicense (Unlicense)": "Unlicense",
}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def purl(name: str, version: str) -> str:
    return f"pkg:pypi/{normalized(name)}@{version}"


def licenses(dist: metadata.Distribution) -> list[dict[str, Any]]:
    """What the distribution declares: its License-Expression (PEP 639); else a short License field (a
    name such as ISC, which says more than a classifier like "BSD License"); else its licence
    classifiers; else the first line of a long License field."""
    meta = dist.metadata
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        return [{"expression": expression}]
    text = (meta.get("License") or "").strip()
    if text.upper() == "UNKNOWN":
        text = ""
    if text and "\n" not in text and len(text) <= 40:
        return [{"license": {"name": text}}]
    found: list[dict[str, Any]] = []
    for classifier in meta.get_all("Classifier") or []:
        name = classifier.split(" :: ")[-1]
        if classifier.startswith("License :: ") and name != "OSI Approved":
            spdx = CLASSIFIERS.get(name)
            found.append({"license": {"id": spdx} if spdx else {"name": name}})
    if found or not text:
        return found
    return [{"license": {"name": text.splitlines()[0][:200]}}]


def requirements(dist: metadata.Distribution, installed: dict[str, metadata.Distribution]) -> list[str]:
    """The installed distributions this one requires (extras and markers that did not apply drop out
    by themselves: what is not installed is not listed)."""
    refs = set()
    for requirement in dist.requires or []:
        if "extra ==" in requirement:
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match and normalized(match[1]) in installed:
            other = installed[normalized(match[1])]
            refs.add(purl(other.metadata["Name"], other.version))
    return sorted(refs)


def bom() -> dict[str, Any]:
    installed = {normalized(d.metadata["Name"]): d for d in metadata.distributions() if d.metadata["Name"]}
    root = installed.get(ROOT_NAME)
    if root is None:
        raise SystemExit(f"sbom.py: {ROOT_NAME} is not installed in this environment ({sys.prefix})")

    def component(dist: metadata.Distribution, kind: str) -> dict[str, Any]:
        ref = purl(dist.metadata["Name"], dist.version)
        return {"type": kind, "bom-ref": ref, "name": dist.metadata["Name"], "version": dist.version,
                "purl": ref, "licenses": licenses(dist)}  # fmt: skip

    components = [component(d, "library") for key, d in sorted(installed.items()) if key != ROOT_NAME]
    dependencies = [
        {"ref": purl(d.metadata["Name"], d.version), "dependsOn": requirements(d, installed)}
        for _, d in sorted(installed.items())
    ]
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "urn:pod-sweeper:" + " ".join(c["bom-ref"] for c in components))
    meta: dict[str, Any] = {
        "tools": {"components": [{"type": "application", "name": "pod-sweeper deploy/sbom.py"}]},
        "component": component(root, "application"),
    }
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        meta["timestamp"] = datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": meta,
        "components": components,
        "dependencies": dependencies,
    }


if __name__ == "__main__":
    json.dump(bom(), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
