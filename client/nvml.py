"""GPU health from NVML, behind the one small probe the agent asks at each heartbeat.

`NvmlProbe(nvml=module)` takes the `pynvml` module (`pip install 'allot[agent]'`) or anything with its
names: the tests drive the agent's health logic through a recorded-response stand-in for it. A probe
with no NVML behind it (module not installed, `libnvidia-ml.so.1` not found: a host without NVIDIA's
driver) is `absent`, and the agent falls back to the GPUs it was told (`--gpus`). Anything else NVML
says is reported, never taken for health:

- XID errors, from a thread blocked in `nvmlEventSetWait` (kind `xid`, with the GPU and the code);
- per GPU at each heartbeat: volatile uncorrected (double-bit) ECC errors, pending retired pages, pending
  row remaps, and its UUID;
- an NVML call that fails on a GPU marks it `failed` and is an `nvml_error` event (once per new error),
  which the cluster's health policy maps to an action; NVML failing as a whole is one too.
"""

import logging
import threading
from dataclasses import dataclass, field

try:
    import pynvml
except ImportError:  # the `agent` extra is not installed: no NVML here
    pynvml = None

log = logging.getLogger("allot-agent")
EVENT_WAIT_MS = 1000
INSTALLED = object()  # NvmlProbe's default: the `pynvml` module, when installed
ERROR_PAUSE_SECONDS = 5.0


@dataclass
class Sample:
    gpus: list[dict] = field(default_factory=list)  # [{index, uuid, health, ecc_uncorrected_volatile, ...}]
    events: list[dict] = field(default_factory=list)  # [{kind: xid|nvml_error, gpu, code, detail}]
    minors: dict[int, int] = field(default_factory=dict)  # GPU index → /dev/nvidia<minor>


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlProbe:
    def __init__(self, nvml=INSTALLED):
        """`nvml`: the pynvml module (by default, when installed), a stand-in with its names, or None (no NVML)."""
        self.nvml = pynvml if nvml is INSTALLED else nvml
        self.absent = self.nvml is None
        self.started = False
        self.failure = ""  # NVML failing as a whole: its error, reported until it works again
        self._lock = threading.Lock()
        self._events: list[dict] = []
        self._errors: dict[int | None, str] = {}  # last error per GPU (None: NVML itself), to report each once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ set-up

    def start(self) -> None:
        """nvmlInit and the XID listener. Safe to call again after a failure (each heartbeat tries)."""
        if self.absent or self.started:
            return
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            if getattr(error, "value", None) == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                self.absent = True  # no driver on this host: not an error, there is nothing to watch
                return
            self._error(None, f"nvmlInit: {error}")
            return
        self.started = True
        self._errors.pop(None, None)
        try:
            event_set = nvml.nvmlEventSetCreate()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                try:
                    nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                except nvml.NVMLError as error:
                    if getattr(error, "value", None) != nvml.NVML_ERROR_NOT_SUPPORTED:
                        self._error(index, f"nvmlDeviceRegisterEvents: {error}")
        except nvml.NVMLError as error:
            self._error(None, f"XID events: {error}")
            return
        self._thread = threading.Thread(target=self._listen, args=(event_set,), name="nvml-xid", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * EVENT_WAIT_MS / 1000)

    def _listen(self, event_set) -> None:
        nvml = self.nvml
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait(event_set, EVENT_WAIT_MS)
            except nvml.NVMLError as error:
                if getattr(error, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                    continue
                self._error(None, f"nvmlEventSetWait: {error}")
                self._stop.wait(ERROR_PAUSE_SECONDS)
                continue
            try:
                index = nvml.nvmlDeviceGetIndex(data.device)
            except nvml.NVMLError:
                index = None
            with self._lock:
                self._events.append({"kind": "xid", "gpu": index, "code": int(data.eventData),
                                     "detail": "reported by NVML"})

    def _error(self, gpu: int | None, message: str) -> None:
        """An NVML failure: an `nvml_error` event the first time it is seen."""
        with self._lock:
            if self._errors.get(gpu) == message:
                return
            self._errors[gpu] = message
            self._events.append({"kind": "nvml_error", "gpu": gpu, "detail": message[:500]})
        log.warning("NVML%s: %s", f" (GPU {gpu})" if gpu is not None else "", message)

    # ------------------------------------------------------------ each heartbeat

    def sample(self) -> Sample | None:
        """What NVML says now, and the events since the last sample; None when the host has no NVML."""
        self.start()
        if self.absent:
            return None
        nvml = self.nvml
        sample = Sample()
        if self.started:
            try:
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError as error:
                self._error(None, f"nvmlDeviceGetCount: {error}")
                count = 0
            for index in range(count):
                sample.gpus.append(self._gpu(index, sample))
        with self._lock:
            sample.events, self._events = self._events, []
        return sample

    def _gpu(self, index: int, sample: Sample) -> dict:
        nvml = self.nvml
        gpu = {"index": index, "health": "ok", "uuid": "", "ecc_uncorrected_volatile": None,
               "retired_pages_pending": None, "remapped_rows_pending": None}
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpu["uuid"] = _text(nvml.nvmlDeviceGetUUID(handle))[:100]
        except nvml.NVMLError as error:
            gpu["health"] = "failed"
            self._error(index, f"GPU {index}: {error}")
            return gpu
        failed = False
        for key, call in (
            ("ecc_uncorrected_volatile", lambda: int(nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC))),
            ("retired_pages_pending", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
             == nvml.NVML_FEATURE_ENABLED),
            ("remapped_rows_pending", lambda: bool(nvml.nvmlDeviceGetRemappedRows(handle)[2])),
            ("minor", lambda: int(nvml.nvmlDeviceGetMinorNumber(handle))),
        ):
            try:
                value = call()
            except nvml.NVMLError as error:
                if getattr(error, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                    continue  # e.g. no retired pages on Ampere and later (they remap rows), no ECC on some parts
                failed = True
                self._error(index, f"GPU {index}: {error}")
                continue
            if key == "minor":
                sample.minors[index] = value
            else:
                gpu[key] = value
        if failed:
            gpu["health"] = "failed"
        else:
            self._errors.pop(index, None)
        return gpu

    # ------------------------------------------------------------ MIG

    def mig_uuid(self, gpu_index: int, start: int) -> str | None:
        """The UUID (``MIG-…``) of the MIG instance starting at memory slice `start` of a GPU, or None."""
        if self.absent:
            return None
        nvml = self.nvml
        try:
            nvml.nvmlInit()
            device = nvml.nvmlDeviceGetHandleByIndex(gpu_index)
            for position in range(nvml.nvmlDeviceGetMaxMigDeviceCount(device)):
                try:
                    mig_device = nvml.nvmlDeviceGetMigDeviceHandleByIndex(device, position)
                except nvml.NVMLError:
                    continue
                instance = nvml.nvmlDeviceGetGpuInstanceById(device, nvml.nvmlDeviceGetGpuInstanceId(mig_device))
                if nvml.nvmlGpuInstanceGetInfo(instance).placement.start == start:
                    uuid = _text(nvml.nvmlDeviceGetUUID(mig_device))
                    return uuid if uuid.startswith("MIG-") else f"MIG-{uuid}"
        except Exception:  # no MIG, an older driver: the server's stable id
            return None
        return None

