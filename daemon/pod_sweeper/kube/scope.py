"""Where a row may aim a DELETE: the namespace scope, and the names Kubernetes could hold at all.

RBAC is not the only wall. A writer of the host table (a bug, a bad migration, someone with that one
grant) chooses the namespace and name each row names, and a systemd service's kubeconfig often
reaches far more than one namespace. So the daemon keeps its own list (``POD_SWEEPER_NAMESPACES``) and
a row outside it ends dead with the reason, before any request is sent. Unset, the scope is every
namespace except Kubernetes' own (``kube-system``, ``kube-public``, ``kube-node-lease``), which must be
named to be reached. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_namespace(namespace: str) -> bool:
    return len(namespace) <= 63 and bool(_DNS1123_LABEL.match(namespace))


def invalid_name(namespace: str, name: str) -> str | None:
    """Why Kubernetes could never hold a pod by this namespace and name, or None when it could.

    Such a row can only have come from a bad write; sending it would at best be answered 404 (and
    recorded as absent, which would hide the bad data), so it goes dead with this reason instead. The
    values are shown with repr(), so that a control character in them reaches no log or terminal raw."""
    if not valid_namespace(namespace):
        return f"namespace {namespace[:80]!r} is not a valid Kubernetes namespace (a DNS-1123 label)"
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return f"pod name {name[:80]!r} is not a valid Kubernetes object name (a DNS-1123 subdomain)"
    return None


@dataclass(frozen=True)
class NamespaceScope:
    """The namespaces the daemon may delete in: ``names``, or (None) every one but Kubernetes' own."""

    names: frozenset[str] | None = None

    def refuses(self, namespace: str) -> str | None:
        """Why a row in ``namespace`` may not be deleted, or None when it may."""
        if self.names is None:
            if namespace in SYSTEM_NAMESPACES:
                return (
                    f"namespace {namespace} is Kubernetes' own: outside the default scope "
                    "(name it in POD_SWEEPER_NAMESPACES to allow it)"
                )
            return None
        if namespace not in self.names:
            return f"namespace {namespace[:80]!r} is outside POD_SWEEPER_NAMESPACES ({', '.join(sorted(self.names))})"
        return None

    def describe(self) -> str:
        """One phrase for the start-up line and ``check``."""
        if self.names is None:
            return "every namespace but kube-system, kube-public and kube-node-lease (POD_SWEEPER_NAMESPACES unset)"
        return ", ".join(sorted(self.names))
