from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import torch

import trainperf
from trainperf.diagnosis import Environment, Measurement, collect_environment
from trainperf.diagnosis._checks import CHECKS, Context

BY_ID = {fn(Context(env=Environment())).id: fn for fn in CHECKS}


def run(check_id, env=None, **kw):
    return BY_ID[check_id](Context(env=env or Environment(physical_cores=4, logical_cores=4), **kw))


def small():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


class Data(torch.utils.data.Dataset):
    def __init__(self, delay=0.0, batch=32, dtype=torch.float32):
        self.delay, self.batch, self.dtype = delay, batch, dtype

    def __len__(self):
        return 12

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.randn(self.batch, 8, dtype=self.dtype), torch.randint(0, 2, (self.batch,))


def loader(**kw):
    return torch.utils.data.DataLoader(Data(**kw), batch_size=None)


def test_every_check_has_its_guide_step_in_order():
    assert [fn(Context(env=Environment())).step for fn in CHECKS] == list(range(1, 14))


def test_step1_backend_fails_when_cuda_is_there_but_unused():
    assert run("backend", Environment(cuda_available=True), model=small()).status == "fail"
    assert run("backend", Environment(cuda_available=False), model=small()).status == "ok"


def test_step2_cudnn_with_fakes():
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3))
    env = Environment(cuda_available=True, cudnn_available=True, cudnn_enabled=True, cudnn_benchmark=False)
    assert run("cudnn", env, model=conv).status == "warn"
    env.cudnn_benchmark = True
    assert run("cudnn", env, model=conv).status == "ok"
    env.cudnn_enabled = False
    assert run("cudnn", env, model=conv).status == "fail"
    assert run("cudnn", Environment()).status == "skip"


@pytest.mark.realtime
def test_step3_slow_loader_with_no_workers_fails_and_fast_one_passes():
    report = trainperf.doctor(model=small(), loader=loader(delay=0.05), steps=3)
    check = report["data_loading"]
    assert check.status == "fail" and check.evidence["etl_pct"] >= 20
    assert "num_workers" in check.fix
    data = [(torch.randn(32, 8), torch.randint(0, 2, (32,))) for _ in range(6)]
    assert trainperf.doctor(model=small(), loader=data, steps=3)["data_loading"].status == "ok"


def test_step3_thresholds_from_measurement():
    m = Measurement(batches=10, etl_s=0.1, step_s=0.9)
    data = [(torch.zeros(2, 8), torch.zeros(2))]
    assert run("data_loading", loader=data, measurement=m).status == "warn"  # 10%: moderate
    m.etl_s = 0.01
    assert run("data_loading", loader=data, measurement=m).status == "ok"


def test_step4_gc_pause_share_and_object_counts():
    m = Measurement(batches=10, step_s=1.0, gc_s=0.2)
    assert run("garbage_collection", measurement=m).status == "fail"
    assert run("garbage_collection", Environment(tracked_objects=600_000)).status == "warn"
    assert run("garbage_collection", Environment(tracked_objects=1000),
               measurement=Measurement(batches=10, step_s=1.0)).status == "ok"


def test_step4_measures_real_gc_pauses():
    class Churn(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            junk = [[{} for _ in range(30)] for _ in range(3000)]
            del junk
            return torch.zeros(4, 8), torch.zeros(4, dtype=torch.long)

    report = trainperf.doctor(model=small(), loader=torch.utils.data.DataLoader(Churn(), batch_size=None), steps=4)
    assert report["garbage_collection"].evidence["collections"] > 0


def test_step5_batch_size():
    assert run("batch_size", measurement=Measurement(batch_size=1)).status == "fail"
    assert run("batch_size", measurement=Measurement(batch_size=4)).status == "warn"
    assert run("batch_size", measurement=Measurement(batch_size=64)).status == "ok"


@pytest.mark.realtime
def test_step6_four_threads_calling_one_model_fail():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    stop = threading.Event()

    def infer():
        x = torch.randn(64, 256)
        while not stop.is_set():
            with torch.no_grad():
                model(x)

    threads = [threading.Thread(target=infer) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        report = trainperf.doctor(model=model, watch_seconds=1.0)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert report["shared_model"].status == "fail"
    assert report["shared_model"].evidence["max_concurrent_forwards"] >= 2
    assert "forward" not in model.__dict__, "the probe removed itself"
    assert trainperf.doctor(model=model, watch_seconds=0.05)["shared_model"].status == "ok"


def test_step7_float64_model_and_inputs_fail():
    assert run("dtypes", model=small().double()).status == "fail"
    assert run("dtypes", measurement=Measurement(input_dtypes=["torch.float64"])).status == "fail"
    assert run("dtypes", model=small()).status == "ok"
    gpu = Environment(gpu_capability=(9, 0), cuda_available=True, float32_matmul_precision="highest")
    assert run("dtypes", gpu).status == "warn"
    gpu.float32_matmul_precision = "high"
    assert run("dtypes", gpu).status == "ok"


def test_step8_memory():
    env = Environment(cuda_available=True, env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    assert run("memory", env).status == "fail"
    assert run("memory", Environment(cuda_available=True), measurement=Measurement(alloc_retries=3)).status == "warn"
    assert run("memory", Environment(cuda_available=True)).status == "ok"
    model = small().eval()
    assert run("memory", model=model).status == "warn"  # inference with autograd on
    with torch.inference_mode():
        assert run("memory", model=model).status == "ok"


def test_step9_huge_output_head_and_deep_mlp_warn():
    head = torch.nn.Sequential(torch.nn.Linear(8, 20000))
    check = run("network_shape", model=head)
    assert check.status == "warn" and "20,000 output classes" in check.reason
    deep = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(25)])
    assert run("network_shape", model=deep).status == "warn"
    big_kernel = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 11))
    assert "kernel size 11" in run("network_shape", model=big_kernel).reason
    assert run("network_shape", model=small()).status == "ok"


def test_step10_split_devices_with_fakes():
    class Fake:
        def __init__(self, devices):
            self.devices = devices

        def parameters(self):
            return [type("P", (), {"device": torch.device(d), "dtype": torch.float32})() for d in self.devices]

    assert run("cpu_fallback", model=Fake(["cuda", "cpu"])).status == "fail"
    assert run("cpu_fallback", model=Fake(["cuda"]), measurement=Measurement(input_devices=["cpu"])).status == "warn"
    assert run("cpu_fallback", model=Fake(["cuda"]), measurement=Measurement(input_devices=["cuda:0"])).status == "ok"
    assert run("cpu_fallback", model=small()).status == "skip"


def test_step11_cpu_capability():
    assert run("cpu_extensions", Environment(cpu_capability="DEFAULT")).status == "warn"
    assert run("cpu_extensions", Environment(cpu_capability="AVX2")).status == "ok"
    assert run("cpu_extensions", Environment(cpu_capability="AVX512")).status == "ok"


def test_step12_other_processes():
    busy = Environment(logical_cores=2, other_cpu_percent=150.0)
    assert run("other_processes", busy).status == "fail"
    assert run("other_processes", Environment(logical_cores=2, other_cpu_percent=5.0)).status == "ok"
    gpu = Environment(logical_cores=2, other_cpu_percent=0.0, gpu_processes=[{"pid": 1, "used_memory": 1}])
    assert run("other_processes", gpu).status == "warn"


def test_step12_sees_a_real_busy_process():
    pytest.importorskip("psutil")
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        env = collect_environment(sample_seconds=0.5)
    finally:
        burner.kill()
        burner.wait()
    assert env.other_cpu_percent is not None and env.other_cpu_percent > 50


def test_without_psutil_step12_says_it_was_skipped_and_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil raises ImportError
    report = trainperf.doctor(watch_seconds=0.01)
    check = report["other_processes"]
    assert check.status == "skip" and check.fix == "pip install psutil"
    assert "needs psutil" in check.reason
    line = next(i for i, text in enumerate(str(report).splitlines()) if "other processes" in text)
    assert str(report).splitlines()[line + 1].split() == ["to", "run", "it:", "pip", "install", "psutil"]
    assert json.loads(report.to_json())["checks"][11]["fix"] == "pip install psutil"


def test_the_torch_extra_brings_psutil_so_step12_runs():
    from pathlib import Path

    import tomllib

    extras = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(req.startswith("psutil") for req in extras["torch"])


def test_step13_oversubscribed_threads():
    env = Environment(torch_threads=16, physical_cores=2, logical_cores=2)
    assert run("threads", env).status == "fail"
    assert run("threads", Environment(torch_threads=4, physical_cores=2)).status == "warn"
    assert run("threads", Environment(torch_threads=2, physical_cores=2)).status == "ok"




def test_report_json_and_table():
    report = trainperf.doctor(model=small(), loader=loader(), steps=2)
    data = json.loads(report.to_json())
    assert len(data["checks"]) == 13
    assert set(data["checks"][0]) == {"step", "id", "title", "status", "evidence", "fix", "reason"}
    assert "fail," in str(report) and "data types" in str(report)
    assert [c["step"] for c in data["checks"]] == list(range(1, 14))
    assert {c["status"] for c in data["checks"]} <= {"ok", "warn", "fail", "skip"}


def test_doctor_leaves_weights_unchanged():
    model = small()
    before = [p.detach().clone() for p in model.parameters()]
    trainperf.doctor(model=model, loader=loader(), steps=2, optimizer=torch.optim.SGD(model.parameters(), lr=1.0))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


def test_cli_doctor_json_on_this_machine():
    proc = subprocess.run([sys.executable, "-m", "trainperf", "doctor", "--json"], capture_output=True, text=True,
                          timeout=120)
    checks = json.loads(proc.stdout)["checks"]
    assert proc.returncode == (1 if any(c["status"] == "fail" for c in checks) else 0), proc.stderr
    assert [c["step"] for c in checks] == list(range(1, 14))
    assert {c["status"] for c in checks} <= {"ok", "warn", "fail", "skip"}
    skipped = {c["id"]: c["reason"] for c in checks if c["status"] == "skip"}
    assert skipped["data_loading"] == "no loader given"


def test_cli_doctor_with_factories(tmp_path):
    (tmp_path / "factories_mod.py").write_text(
        "import torch\n"
        "def make_model():\n    return torch.nn.Sequential(torch.nn.Linear(8, 20000))\n"
        "def make_loader():\n    return [(torch.randn(1, 8), torch.zeros(1, dtype=torch.long)) for _ in range(4)]\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "trainperf", "doctor", "--json", "--model", "factories_mod:make_model",
         "--loader", "factories_mod:make_loader", "--steps", "2"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**__import__("os").environ,
                                                                        "PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 1, proc.stderr  # a check failed: non-zero for CI
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["network_shape"]["status"] == "warn"
    assert checks["batch_size"]["status"] == "fail"
    bad = subprocess.run([sys.executable, "-m", "trainperf", "doctor", "--model", "nope"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "package.module:function" in bad.stderr
