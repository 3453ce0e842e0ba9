"""The agent's NVML probe (client/nvml.py), driven through the recorded-response stand-in for pynvml."""

import time

import pynvml
import pytest

from client.nvml import NvmlProbe
from tests.nvml_standin import RecordedNvml, recording


@pytest.fixture
def nvml():
    return RecordedNvml(recording("h100x4.json"))


@pytest.fixture
def probe(nvml):
    probe = NvmlProbe(nvml=nvml)
    yield probe
    probe.stop()


def wait_for_events(probe, nvml, kind, tries=100):
    """The XID listener is a thread: sample until it has passed the event on."""
    for _ in range(tries):
        sample = probe.sample()
        if any(event["kind"] == kind for event in sample.events):
            return sample
        time.sleep(0.02)
    raise AssertionError(f"no {kind} event")


def test_no_nvml_on_the_host_means_no_sample_not_an_error():
    assert NvmlProbe(nvml=None).sample() is None
    missing = NvmlProbe(nvml=RecordedNvml(recording("h100x4.json"), init_error="NVML_ERROR_LIBRARY_NOT_FOUND"))
    assert missing.sample() is None and missing.absent


def test_a_healthy_host_reports_each_gpu_with_its_counters(probe):
    sample = probe.sample()
    assert [gpu["index"] for gpu in sample.gpus] == [0, 1, 2, 3]
    assert sample.gpus[0] == {"index": 0, "health": "ok", "uuid": "GPU-5f1c2b0e-8a5d-4c37-9a3e-0b6a2f1d7c10",
                              "ecc_uncorrected_volatile": 0, "retired_pages_pending": None,  # not on Hopper
                              "remapped_rows_pending": False}
    assert sample.events == [] and sample.minors == {0: 0, 1: 1, 2: 2, 3: 3}


def test_an_xid_reaches_the_heartbeat_from_the_event_thread(probe, nvml):
    probe.sample()
    nvml.advance()  # GPU 3 falls off the bus
    sample = wait_for_events(probe, nvml, "xid")
    assert sample.events == [{"kind": "xid", "gpu": 3, "code": 79, "detail": "reported by NVML"}]
    assert probe.sample().events == []  # told once


def test_an_nvml_error_is_an_event_and_a_failed_gpu_never_healthy_and_told_once(probe, nvml):
    probe.sample()
    nvml.goto(2)  # GPU 2: GPU is lost
    sample = probe.sample()
    assert sample.gpus[2]["health"] == "failed" and sample.gpus[3]["health"] == "ok"
    errors = [event for event in sample.events if event["kind"] == "nvml_error"]
    assert errors == [{"kind": "nvml_error", "gpu": 2, "detail": "GPU 2: GPU is lost"}]
    assert isinstance(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST), pynvml.NVMLError_GpuIsLost)
    nvml.advance()  # the same error again: still failed, not a second event
    again = probe.sample()
    assert again.gpus[2]["health"] == "failed"
    assert not [event for event in again.events if event["kind"] == "nvml_error"]


def test_nvml_failing_as_a_whole_is_an_error_event(nvml):
    broken = NvmlProbe(nvml=RecordedNvml(recording("h100x4.json"), init_error="NVML_ERROR_DRIVER_NOT_LOADED"))
    sample = broken.sample()
    assert sample.gpus == []
    assert sample.events == [{"kind": "nvml_error", "gpu": None, "detail": "nvmlInit: Driver Not Loaded"}]
    assert broken.sample().events == []


def test_uncorrected_ecc_errors_and_pending_row_remaps_are_reported(probe, nvml):
    nvml.goto(4)
    gpu = probe.sample().gpus[1]
    assert (gpu["ecc_uncorrected_volatile"], gpu["remapped_rows_pending"], gpu["health"]) == (1, True, "ok")
