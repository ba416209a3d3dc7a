"""Dense peak FLOP/s of accelerators, per device and number format, for model FLOPs utilisation (MFU).

Every figure is the maker's dense (not 2:4-sparse) tensor-core peak for that format, per device, at
the boost clock; FP32 is the plain (non-tensor-core) rate. A device or format not in the table has no
peak: :func:`peak_flops` gives ``None`` rather than a guess. Names are matched as ``torch`` reports
them (``torch.cuda.get_device_name()``): ``"NVIDIA H100 80GB HBM3"``, ``"NVIDIA A100-SXM4-40GB"``,
``"NVIDIA GeForce RTX 4090"``, ``"Tesla T4"``. It knows no framework.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["peak_flops", "find_peak", "Peak", "PEAK_FORMATS"]

#: The number formats the table knows, and the names (``torch`` dtypes among them) that mean each.
PEAK_FORMATS: dict[str, tuple[str, ...]] = {
    "fp64": ("fp64", "float64", "double"),
    "fp32": ("fp32", "float32", "float"),
    "tf32": ("tf32", "tfloat32"),
    "bf16": ("bf16", "bfloat16"),
    "fp16": ("fp16", "float16", "half"),
    "fp8": ("fp8", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"),
}
_FORMAT_OF = {alias: fmt for fmt, aliases in PEAK_FORMATS.items() for alias in aliases}

_T = 1e12


def _chip(fp32: float, tf32: float | None, bf16: float | None, fp16: float, fp8: float | None = None,
          fp64: float | None = None) -> dict[str, float]:
    """One device's dense peaks in TFLOP/s (``None``: the format has no tensor-core path on it)."""
    table = {"fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16, "fp8": fp8, "fp64": fp64}
    return {fmt: value * _T for fmt, value in table.items() if value is not None}


#: Device -> dense peaks. Sources: NVIDIA's data sheets (H100, H200, B200, A100, A10, A30, A40, L4,
#: L40, L40S, RTX A6000, RTX 6000 Ada, T4, V100) and architecture white papers (Ada and Ampere
#: GeForce: FP16 and BF16 with FP32 accumulation, half the FP16-accumulate rate). Figures the sheets
#: give only with sparsity are halved.
PEAKS: dict[str, dict[str, float]] = {
    "B200": _chip(75.0, 1125.0, 2250.0, 2250.0, 4500.0, 37.0),
    "H200 NVL": _chip(60.0, 417.5, 835.5, 835.5, 1670.5, 30.0),
    "H200 SXM": _chip(66.9, 494.7, 989.4, 989.4, 1978.9, 33.5),
    "GH200": _chip(66.9, 494.7, 989.4, 989.4, 1978.9, 33.5),
    "H100 NVL": _chip(60.0, 417.5, 835.5, 835.5, 1670.5, 30.0),
    "H100 SXM": _chip(66.9, 494.7, 989.4, 989.4, 1978.9, 33.5),
    "H100 PCIe": _chip(51.2, 378.0, 756.5, 756.5, 1513.0, 25.6),
    "A100": _chip(19.5, 156.0, 312.0, 312.0, None, 9.7),
    "A30": _chip(10.3, 82.0, 165.0, 165.0, None, 5.2),
    "A40": _chip(37.4, 74.8, 149.7, 149.7),
    "A10": _chip(31.2, 62.5, 125.0, 125.0),
    # AWS's A10G: the A10's chip and configuration (72 SMs; 31.5 TFLOP/s FP32 as AWS states it, at a
    # 1.71 GHz boost against the A10's 1.695): the A10's tensor rates, to within 1%.
    "A10G": _chip(31.5, 62.5, 125.0, 125.0),
    "L40S": _chip(91.6, 183.0, 362.05, 362.05, 733.0),
    "L40": _chip(90.5, 90.5, 181.05, 181.05, 362.0),
    "L4": _chip(30.3, 60.0, 121.0, 121.0, 242.5),
    "RTX 6000 Ada": _chip(91.1, 182.1, 364.2, 364.2, 728.5),
    "RTX A6000": _chip(38.7, 77.4, 154.8, 154.8),
    "RTX 4090": _chip(82.6, 82.6, 165.2, 165.2, 330.3),
    "RTX 4080": _chip(48.7, 48.7, 97.5, 97.5, 194.9),
    "RTX 3090": _chip(35.6, 35.6, 71.0, 71.0),
    "V100 SXM2": _chip(15.7, None, None, 125.0, None, 7.8),
    "V100 PCIe": _chip(14.0, None, None, 112.0, None, 7.0),
    "V100S PCIe": _chip(16.4, None, None, 130.0, None, 8.2),
    "T4": _chip(8.1, None, None, 65.0),
}

# How a name torch reports picks a row: the first pattern that matches the name, lower-cased, with
# "nvidia", "geforce" and "tesla" taken out. A name two rows could mean (a bare "H100") matches none.
_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bb200\b", "B200"),
    (r"\bgh200\b", "GH200"),
    (r"\bh200\b.*\bnvl\b", "H200 NVL"),
    (r"\bh200\b(?!.*\b(pcie|nvl)\b)", "H200 SXM"),
    (r"\bh100\b.*\bnvl\b", "H100 NVL"),
    (r"\bh100\b.*\bpcie\b", "H100 PCIe"),
    (r"\bh100\b.*\b(sxm\w*|hbm3)\b", "H100 SXM"),
    (r"\ba100\b", "A100"),
    (r"\ba30\b", "A30"),
    (r"\ba40\b", "A40"),
    (r"\ba10g\b", "A10G"),
    (r"\ba10\b", "A10"),
    (r"\bl40s\b", "L40S"),
    (r"\bl40\b", "L40"),
    (r"\bl4\b", "L4"),
    (r"\brtx 6000 ada\b", "RTX 6000 Ada"),
    (r"\brtx a6000\b", "RTX A6000"),
    (r"\brtx 4090\b", "RTX 4090"),
    (r"\brtx 4080\b(?! super)", "RTX 4080"),
    (r"\brtx 3090\b(?! ti)", "RTX 3090"),
    (r"\bv100s\b", "V100S PCIe"),
    (r"\bv100\b.*\bsxm2\b", "V100 SXM2"),
    (r"\bv100\b.*\bpcie\b", "V100 PCIe"),
    (r"\bt4\b", "T4"),
)


@functools.cache
def _compiled() -> tuple[tuple[re.Pattern[str], str], ...]:
    """The patterns, compiled on the first look-up (not when ``import trainperf`` runs)."""
    return tuple((re.compile(pattern), row) for pattern, row in _PATTERNS)


@dataclass(frozen=True, slots=True)
class Peak:
    """A peak and where it came from.

    Attributes:
        flops: FLOP/s, dense.
        device: the table's row (``"H100 SXM"``), or the name given with the figure.
        format: the number format (``"bf16"``, ``"tf32"``, ...).
        source: ``"table"`` (trainperf's table) or ``"given"`` (the user's ``peak_flops=``).
    """

    flops: float
    device: str
    format: str
    source: str

    def describe(self) -> str:
        """``H100 SXM bf16 dense, 989.4 TFLOP/s (table)``; a given peak: ``312.0 TFLOP/s (given)``."""
        if self.source == "given":
            return (f"{self.flops / _T:.1f} TFLOP/s (given)" if self.flops >= _T
                    else f"{self.flops / 1e9:.1f} GFLOP/s (given)")
        return f"{self.device} {self.format} dense, {self.flops / _T:.1f} TFLOP/s ({self.source})"


def number_format(dtype: object) -> str | None:
    """The table's name for ``dtype`` (a ``torch.dtype`` or a name such as ``"bf16"``), else ``None``."""
    name = str(dtype).lower().removeprefix("torch.")
    return _FORMAT_OF.get(name)


def device_row(device_name: str) -> str | None:
    """The table's row for a device named as ``torch`` names it, else ``None`` (unknown, a MIG slice,
    or a name two rows could mean)."""
    name = device_name.lower()
    if re.search(r"\bmig\b", name):  # a slice's peak is a share we cannot see
        return None
    name = re.sub(r"\b(nvidia|geforce|tesla)\b", " ", name)
    name = re.sub(r"[-_]", " ", name)
    name = " ".join(name.split())
    for pattern, row in _compiled():
        if pattern.search(name):
            return row
    return None


def find_peak(device_name: str, dtype: object) -> Peak | None:
    """The table's dense peak for ``device_name`` in ``dtype``, with its row; ``None`` when unknown."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a str (as torch.cuda.get_device_name() gives it), got {device_name!r}")
    fmt = number_format(dtype)
    if fmt is None:
        known = ", ".join(PEAK_FORMATS)
        raise ValueError(f"dtype must be a torch dtype or one of {known}, got {dtype!r}")
    row = device_row(device_name)
    if row is None:
        return None
    flops = PEAKS[row].get(fmt)
    return None if flops is None else Peak(flops, row, fmt, "table")


def peak_flops(device_name: str, dtype: object) -> float | None:
    """The dense peak FLOP/s of ``device_name`` (as ``torch.cuda.get_device_name()`` gives it) in
    ``dtype`` (``torch.bfloat16``, ``"tf32"``, ...), or ``None`` when the device or the format is not
    known: never a guess.

    Example:
        >>> peak_flops("NVIDIA H100 80GB HBM3", "bf16")
        989400000000000.0
        >>> peak_flops("NVIDIA A100-SXM4-40GB", "tf32")
        156000000000000.0
        >>> peak_flops("Some Future GPU", "bf16") is None
        True
    """
    peak = find_peak(device_name, dtype)
    return None if peak is None else peak.flops
