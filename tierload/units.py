"""Human byte sizes at the edge (YAML, CLI): "512MiB", "2GB", 1024.

Parsing is delegated to pydantic's ``ByteSize`` (decimal units kB/MB/GB are powers
of 1000, binary units KiB/MiB/GiB powers of 1024).
"""

from __future__ import annotations

from pydantic import ByteSize, TypeAdapter, ValidationError

from tierload.errors import CapacityParseError

_BYTE_SIZE = TypeAdapter(ByteSize)


def parse_bytes(value: str | int | float, *, field: str = "capacity") -> int:
    """Parse a capacity into a whole number of bytes.

    Args:
        value: ``"512MiB"``, ``"2GB"``, ``"1.5 GiB"``, or a plain non-negative integer.
        field: Name of the setting, used in the error message.

    Returns:
        The size in bytes (int, >= 0).

    Raises:
        CapacityParseError: The value is not a size (e.g. ``"ten gigs"``) or is negative.
    """
    if isinstance(value, bool):
        raise CapacityParseError(f"{field}: {value!r} is not a size in bytes; use e.g. 512MiB, 2GB or 1048576")
    if isinstance(value, float) and not value.is_integer():
        raise CapacityParseError(f"{field}: {value!r} is not a whole number of bytes")
    try:
        parsed = int(_BYTE_SIZE.validate_python(int(value) if isinstance(value, float) else value))
    except (ValidationError, ValueError, TypeError):
        raise CapacityParseError(
            f"{field}: {value!r} is not a size in bytes; use a number with a unit such as "
            "512MiB, 2GiB, 2GB or a plain byte count like 1048576") from None
    if parsed < 0:
        raise CapacityParseError(f"{field}: {value!r} is negative; capacities are >= 0 bytes")
    return parsed


def format_bytes(num_bytes: float) -> str:
    """Render a byte count for people: ``1536 -> '1.5 KiB'``."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
