"""The command-line values that ``generate`` and ``bench`` both take, checked in one place: the
decoding methods, the device and a memory size. Each check names the bad value and what is
allowed."""

from __future__ import annotations


def method_names() -> tuple[str, ...]:
    """Every decoding method the speculative loop knows (`casspec_ref.speculative.METHODS`);
    imported when asked, so that ``--help`` does not load torch."""
    from casspec_ref.speculative import METHODS

    return tuple(METHODS)


def check_device(device: str) -> str | None:
    """Why ``--device`` cannot be used here, or None when it can (cpu; cuda when available)."""
    import torch

    if device == "cpu":
        return None
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            return f"--device {device}: CUDA is not available here; use --device cpu"
        return None
    return f"--device {device!r} is not supported: use cpu or cuda"


def parse_size(text: str | None, flag: str) -> int | None:
    """``"8G"``, ``"512M"``, ``"1000000"`` -> bytes (binary units); ``None`` stays ``None``."""
    if text is None:
        return None
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    body, unit = (text[:-1], units[text[-1].upper()]) if text[-1:].upper() in units else (text, 1)
    try:
        value = float(body)
    except ValueError:
        value = -1.0
    if not (value > 0 and value * unit < 2**63):
        raise ValueError(f"{flag} {text!r}: expected a positive size such as 8G, 512M or 1000000")
    return int(value * unit)
