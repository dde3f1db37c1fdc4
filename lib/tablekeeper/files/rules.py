"""How locations compare: one comparison key per file, whatever its spelling."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from tablekeeper.io.uri import DEFAULT_EQUIVALENT_SCHEMES, normalize_location


@dataclass(frozen=True)
class PathRules:
    """How locations compare (pickled to executors)."""

    equivalent_schemes: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_EQUIVALENT_SCHEMES))
    equivalent_authorities: Mapping[str, str] | None = None

    def key(self, location: str) -> str:
        # Files of one directory share their key's prefix: normalising the directory once makes a
        # key a lookup and a concatenation (millions of keys per run).
        slash = location.rfind("/")
        authority = location.find("://")
        # The last slash must end a path segment, not the "//" before an authority.
        if slash > 0 and (authority < 0 or 0 <= location.find("/", authority + 3) <= slash):
            name = location[slash + 1 :]
            if name not in ("", ".", ".."):
                return self.prefix(location[:slash]) + name
        return normalize_location(location, self.equivalent_schemes, self.equivalent_authorities)

    def __post_init__(self) -> None:
        # Hashable copies of the rules, for the prefix cache.
        schemes = tuple(sorted(self.equivalent_schemes.items()))
        authorities = tuple(sorted((self.equivalent_authorities or {}).items()))
        object.__setattr__(self, "_rules", (schemes, authorities))

    def prefix(self, directory: str) -> str:
        """What the key of every file directly in ``directory`` starts with (ends with ``/``)."""
        schemes, authorities = self.__dict__["_rules"]
        return _key_prefix(directory, schemes, authorities)

    def to_json(self) -> dict[str, dict[str, str]]:
        return {
            "equivalent_schemes": dict(self.equivalent_schemes),
            "equivalent_authorities": dict(self.equivalent_authorities or {}),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Mapping[str, str]]) -> PathRules:
        return cls(dict(value["equivalent_schemes"]), dict(value["equivalent_authorities"]) or None)


@functools.lru_cache(maxsize=1 << 16)
def _key_prefix(
    parent: str, schemes: tuple[tuple[str, str], ...], authorities: tuple[tuple[str, str], ...]
) -> str:
    """The key of ``parent/x`` without the ``x``: what every child's key starts with."""
    return normalize_location(parent + "/x", dict(schemes), dict(authorities) or None)[:-1]
