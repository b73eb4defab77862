"""The machine's processor as /proc/cpuinfo describes it (`data/threads`, `data/cpu_linear` record it)."""

from __future__ import annotations


def cpuinfo(field: str) -> str:
    """The first CPU's `field` in /proc/cpuinfo ("model name", "vendor_id", "flags"), else ""."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip().lower() == field:
                    return value.strip()
    except OSError:
        pass
    return ""
