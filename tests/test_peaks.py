"""The dense peak table: device names as torch reports them, dense figures only, and no guess for a
device or format it does not know."""

from __future__ import annotations

import pytest

from trainperf import peak_flops
from trainperf.records._peaks import PEAKS, Peak, device_row, find_peak, number_format

T = 1e12

# (name as torch.cuda.get_device_name() gives it, dtype, dense TFLOP/s from the maker's sheet)
KNOWN = [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
    ("NVIDIA H100 80GB HBM3", "fp8", 1978.9),
    ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
    ("NVIDIA H100 80GB HBM3", "fp32", 66.9),
    ("NVIDIA H100 PCIe", "bf16", 756.5),
    ("NVIDIA H100 NVL", "bf16", 835.5),  # not the sparse 1671
    ("NVIDIA H200", "bf16", 989.4),
    ("NVIDIA H200 NVL", "fp16", 835.5),
    ("NVIDIA GH200 480GB", "bf16", 989.4),
    ("NVIDIA B200", "bf16", 2250.0),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100-SXM4-40GB", "tf32", 156.0),
    ("NVIDIA A100-PCIE-40GB", "fp16", 312.0),
    ("NVIDIA A100 80GB PCIe", "fp32", 19.5),
    ("NVIDIA A30", "bf16", 165.0),
    ("NVIDIA A40", "bf16", 149.7),
    ("NVIDIA A10", "bf16", 125.0),
    ("NVIDIA A10G", "bf16", 125.0),
    ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA L40", "bf16", 181.05),
    ("NVIDIA L40S", "bf16", 362.05),  # not an L4's 121
    ("NVIDIA RTX A6000", "bf16", 154.8),
    ("NVIDIA RTX 6000 Ada Generation", "bf16", 364.2),
    ("NVIDIA GeForce RTX 4090", "bf16", 165.2),
    ("NVIDIA GeForce RTX 4080", "fp16", 97.5),
    ("NVIDIA GeForce RTX 3090", "bf16", 71.0),
    ("Tesla V100-SXM2-16GB", "fp16", 125.0),
    ("Tesla V100-SXM2-32GB", "fp32", 15.7),
    ("Tesla V100-PCIE-16GB", "fp16", 112.0),
    ("Tesla V100S-PCIE-32GB", "fp16", 130.0),
    ("Tesla T4", "fp16", 65.0),
]


@pytest.mark.parametrize(("name", "dtype", "tflops"), KNOWN)
def test_the_dense_peak_of_a_device_as_torch_names_it(name, dtype, tflops):
    assert peak_flops(name, dtype) == pytest.approx(tflops * T)


def test_at_least_twenty_distinct_device_names_are_known():
    assert len({name for name, _, _ in KNOWN}) >= 20


@pytest.mark.parametrize("name", [
    "NVIDIA H100",  # SXM, PCIe or NVL: which one cannot be told
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb",  # a slice: its share of the peak is not in its name
    "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
    "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA GeForce RTX 4080 SUPER",
    "AMD Instinct MI300X",
    "Some Future GPU",
    "",
])
def test_a_device_the_table_does_not_know_or_cannot_tell_has_no_peak(name):
    assert peak_flops(name, "bf16") is None and find_peak(name, "bf16") is None


def test_a_format_the_device_has_no_tensor_path_for_has_no_peak():
    assert peak_flops("Tesla T4", "bf16") is None
    assert peak_flops("Tesla V100-SXM2-16GB", "tf32") is None
    assert peak_flops("NVIDIA A100-SXM4-80GB", "fp8") is None  # Ampere has no FP8


def test_torch_dtypes_and_their_names_mean_the_same_format():
    torch = pytest.importorskip("torch")
    assert peak_flops("NVIDIA H100 80GB HBM3", torch.bfloat16) == peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert number_format(torch.float16) == number_format("half") == "fp16"
    assert number_format(torch.float32) == "fp32" and number_format("tfloat32") == "tf32"
    assert number_format(torch.float8_e4m3fn) == "fp8" and number_format(torch.int8) is None


def test_the_peak_says_where_it_came_from():
    peak = find_peak("NVIDIA H100 80GB HBM3", "bf16")
    assert peak == Peak(989.4 * T, "H100 SXM", "bf16", "table")
    assert peak.describe() == "H100 SXM bf16 dense, 989.4 TFLOP/s (table)"


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="device_name"):
        peak_flops(None, "bf16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype.*'int4'"):
        peak_flops("NVIDIA L4", "int4")


def test_every_row_is_matched_by_some_name_and_dense_rates_keep_their_order():
    names = {device_row(name) for name, _, _ in KNOWN}
    assert names == set(PEAKS)  # no row that no name reaches
    for row, peaks in PEAKS.items():
        if "bf16" in peaks:
            assert peaks["bf16"] >= peaks["tf32"] >= peaks["fp32"] * 0.99, row  # tensor paths are no slower
        if "fp8" in peaks:
            assert peaks["fp8"] == pytest.approx(2 * peaks["bf16"], rel=0.02), row  # sheets round


def test_the_tables_formats_keep_the_rates_each_architecture_has():
    for row, peaks in PEAKS.items():
        if "bf16" in peaks:
            assert peaks["fp16"] == peaks["bf16"], row  # one tensor-core rate for both 16-bit formats
            assert peaks["tf32"] == pytest.approx(peaks["bf16"] / 2, rel=0.015), row  # TF32 at half (sheets round)
        if "fp64" in peaks:
            assert peaks["fp64"] == pytest.approx(peaks["fp32"] / 2, rel=0.02), row  # data-centre FP64: half FP32
    # the plain FP32 rate of each device, as its sheet gives it (the tensor rates are pinned above)
    fp32 = {"B200": 75.0, "H200 NVL": 60.0, "H200 SXM": 66.9, "GH200": 66.9, "H100 NVL": 60.0, "H100 SXM": 66.9,
            "H100 PCIe": 51.2, "A100": 19.5, "A30": 10.3, "A40": 37.4, "A10": 31.2, "A10G": 31.5, "L40S": 91.6,
            "L40": 90.5, "L4": 30.3, "RTX 6000 Ada": 91.1, "RTX A6000": 38.7, "RTX 4090": 82.6, "RTX 4080": 48.7,
            "RTX 3090": 35.6, "V100 SXM2": 15.7, "V100 PCIe": 14.0, "V100S PCIe": 16.4, "T4": 8.1}
    assert {row: peaks["fp32"] / T for row, peaks in PEAKS.items()} == pytest.approx(fp32)


def test_every_devices_tf32_and_fp8_figures_are_their_sheets_dense_ones():
    tf32 = {"B200": 1125.0, "H200 NVL": 417.5, "H200 SXM": 494.7, "GH200": 494.7, "H100 NVL": 417.5,
            "H100 SXM": 494.7, "H100 PCIe": 378.0, "A100": 156.0, "A30": 82.0, "A40": 74.8, "A10": 62.5,
            "A10G": 62.5, "L40S": 183.0, "L40": 90.5, "L4": 60.0, "RTX 6000 Ada": 182.1, "RTX A6000": 77.4,
            "RTX 4090": 82.6, "RTX 4080": 48.7, "RTX 3090": 35.6}
    fp8 = {"B200": 4500.0, "H200 NVL": 1670.5, "H200 SXM": 1978.9, "GH200": 1978.9, "H100 NVL": 1670.5,
           "H100 SXM": 1978.9, "H100 PCIe": 1513.0, "L40S": 733.0, "L40": 362.0, "L4": 242.5,
           "RTX 6000 Ada": 728.5, "RTX 4090": 330.3, "RTX 4080": 194.9}
    assert {row: p["tf32"] / T for row, p in PEAKS.items() if "tf32" in p} == pytest.approx(tf32)
    assert {row: p["fp8"] / T for row, p in PEAKS.items() if "fp8" in p} == pytest.approx(fp8)
    fp64 = {"B200": 37.0, "H200 NVL": 30.0, "H200 SXM": 33.5, "GH200": 33.5, "H100 NVL": 30.0, "H100 SXM": 33.5,
            "H100 PCIe": 25.6, "A100": 9.7, "A30": 5.2, "V100 SXM2": 7.8, "V100 PCIe": 7.0, "V100S PCIe": 8.2}
    assert {row: p["fp64"] / T for row, p in PEAKS.items() if "fp64" in p} == pytest.approx(fp64)


def test_a_given_peak_is_described_in_the_unit_that_reads_and_a_peak_is_a_fixed_value():
    assert Peak(312e12, "", "", "given").describe() == "312.0 TFLOP/s (given)"
    assert Peak(1e12, "", "", "given").describe() == "1.0 TFLOP/s (given)"
    assert Peak(5e9, "", "", "given").describe() == "5.0 GFLOP/s (given)"
    assert Peak(999e9, "", "", "given").describe() == "999.0 GFLOP/s (given)"
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        Peak(1e12, "", "", "given").flops = 2e12  # type: ignore[misc]
