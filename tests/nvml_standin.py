"""A recorded-response stand-in for the `pynvml` module, for the agent's NVML probe (client/nvml.py).

It answers from a recording (tests/fixtures/nvml/*.json: per GPU what NVML returns, and steps, one per
heartbeat, with the XID events NVML delivers and the calls that fail), with pynvml's own constants and
exception classes, so the probe meets what it meets on a GPU host: `NVMLError_GPUIsLost` and the like.
`advance()` moves to the next step. Nothing here touches a real device.
"""

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pynvml

RECORDINGS = Path(__file__).parent / "fixtures" / "nvml"


def recording(name: str) -> dict:
    return json.loads((RECORDINGS / name).read_text())


class RecordedNvml:
    def __init__(self, recorded: dict, *, init_error: str | None = None):
        self._recorded = recorded
        self._step = -1
        self._init_error = init_error
        self._events: list[dict] = []
        self._lock = threading.Lock()
        self.calls: list[str] = []
        self.advance()

    # The probe looks these up on the module: pynvml's own.
    def __getattr__(self, name):
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def advance(self) -> dict:
        """The next step of the recording (what the next heartbeat sees); its events are delivered now."""
        self._step = min(self._step + 1, len(self._recorded["steps"]) - 1)
        step = self._recorded["steps"][self._step]
        with self._lock:
            self._events.extend(step.get("events", []))
        return step

    def goto(self, step: int) -> dict:
        """Straight to step `step` (its events delivered, those of the steps passed over not)."""
        self._step = step - 1
        return self.advance()

    def _fail(self, call: str, index: int | None) -> None:
        self.calls.append(call)
        code = self._recorded["steps"][self._step].get("errors", {}).get(call, {}).get(str(index))
        if code:
            raise pynvml.NVMLError(getattr(pynvml, code))

    def _device(self, index: int) -> dict:
        device = dict(self._recorded["devices"][index])
        device.update(self._recorded["steps"][self._step].get("devices", {}).get(str(index), {}))
        return device

    @staticmethod
    def _answer(value):
        if isinstance(value, str) and value.startswith("NVML_ERROR_"):
            raise pynvml.NVMLError(getattr(pynvml, value))
        return value

    def nvmlInit(self):
        self.calls.append("nvmlInit")
        if self._init_error:
            raise pynvml.NVMLError(getattr(pynvml, self._init_error))

    def nvmlDeviceGetCount(self):
        self._fail("nvmlDeviceGetCount", None)
        return len(self._recorded["devices"])

    def nvmlDeviceGetHandleByIndex(self, index):
        self._fail("nvmlDeviceGetHandleByIndex", index)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetIndex(self, handle):
        return handle.index

    def nvmlDeviceGetUUID(self, handle):
        self._fail("nvmlDeviceGetUUID", handle.index)
        return self._answer(self._device(handle.index)["uuid"])

    def nvmlDeviceGetMinorNumber(self, handle):
        self._fail("nvmlDeviceGetMinorNumber", handle.index)
        return self._answer(self._device(handle.index)["minor"])

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        assert (error_type, counter_type) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        self._fail("nvmlDeviceGetTotalEccErrors", handle.index)
        return self._answer(self._device(handle.index)["ecc_uncorrected_volatile"])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        self._fail("nvmlDeviceGetRetiredPagesPendingStatus", handle.index)
        return self._answer(self._device(handle.index)["retired_pages_pending"])

    def nvmlDeviceGetRemappedRows(self, handle):
        self._fail("nvmlDeviceGetRemappedRows", handle.index)
        return tuple(self._answer(self._device(handle.index)["remapped_rows"]))

    def nvmlEventSetCreate(self):
        return SimpleNamespace(devices=set())

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        assert event_types & pynvml.nvmlEventTypeXidCriticalError
        event_set.devices.add(handle.index)

    def nvmlEventSetWait(self, event_set, timeout_ms):
        deadline = time.monotonic() + min(timeout_ms / 1000, 0.05)
        while time.monotonic() < deadline:
            with self._lock:
                if self._events:
                    event = self._events.pop(0)
                    return SimpleNamespace(device=SimpleNamespace(index=event["gpu"]), eventData=event["xid"],
                                           eventType=pynvml.nvmlEventTypeXidCriticalError)
            time.sleep(0.005)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
