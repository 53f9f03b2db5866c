"""The CUDA device as irkit's GPU runtime sees it: the driver library, one checked call,
device 0 with its primary context and stream, its attributes, and nvidia-smi's clocks,
temperature and power for a record's fingerprint.

Every driver call goes through `driver_call`, which turns an error code into one line
naming the call; no driver library or no device is IrkitError(NO_DEVICE).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from irkit.errors import IrkitError

NO_DEVICE = "no CUDA device available"


def cuda_driver():
    from cuda.bindings import driver

    return driver


def driver_call(what: str, result: Any) -> Any:
    """The values of a driver call's result tuple, after checking its error code."""
    drv = cuda_driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        text = name.decode() if isinstance(name, bytes) else str(err)
        raise IrkitError(f"CUDA {what} failed: {text}")
    return values[0] if len(values) == 1 else values


@dataclass
class Device:
    """The current CUDA device and its primary context, with what records need."""

    ordinal: int
    handle: Any
    context: Any
    name: str
    pci_bus_id: str
    arch: str
    max_threads: int
    max_shared: int
    l2_bytes: int
    driver_version: int
    stream: Any = None
    _flush: int = 0

    def attribute(self, attr: str) -> int:
        drv = cuda_driver()
        return int(
            driver_call(
                f"cuDeviceGetAttribute({attr})",
                drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, attr), self.handle),
            )
        )

    def fingerprint(self) -> dict[str, Any]:
        """What a GPU record carries: the device, driver and compiler, and (`clocks_start`)
        its clocks, temperature and power now; `clocks()` again after a run gives the end."""
        from irkit.codegen.nvrtc import nvrtc_version

        static = {
            "driver": "driver_version",
            "sm_max_mhz": "clocks.max.sm",
            "memory_max_mhz": "clocks.max.mem",
        }
        smi = query_smi(self.pci_bus_id, {**static, **SMI_CLOCKS})  # one nvidia-smi call
        major, minor = divmod(self.driver_version, 1000)
        return {
            "device": self.name,
            "compute_capability": self.arch.removeprefix("sm_"),
            "pci_bus_id": self.pci_bus_id,
            "driver": smi["driver"],
            "cuda_driver_api": f"{major}.{minor // 10}",
            "nvrtc": nvrtc_version(),
            "l2_bytes": self.l2_bytes,
            "l2_flush_bytes": 2 * self.l2_bytes,
            "sm_max_mhz": smi["sm_max_mhz"],
            "memory_max_mhz": smi["memory_max_mhz"],
            "clocks_start": {k: smi[k] for k in SMI_CLOCKS},
        }

    def clocks(self) -> dict[str, Any]:
        """Current SM and memory clocks (MHz), temperature (C), power (W) and performance
        state, from nvidia-smi; None for each where nvidia-smi cannot say."""
        return query_smi(self.pci_bus_id, SMI_CLOCKS)

    def flush_l2(self) -> None:
        """Overwrite twice the L2's bytes so the next sample reads from DRAM."""
        drv = cuda_driver()
        if not self._flush:
            self._flush = int(
                driver_call("cuMemAlloc (L2 flush buffer)", drv.cuMemAlloc(2 * self.l2_bytes))
            )
        driver_call(
            "cuMemsetD8Async", drv.cuMemsetD8Async(self._flush, 0, 2 * self.l2_bytes, self.stream)
        )


SMI_CLOCKS = {
    "sm_mhz": "clocks.sm",
    "memory_mhz": "clocks.mem",
    "temperature_c": "temperature.gpu",
    "power_w": "power.draw",
    "pstate": "pstate",
}
"""The state a timing depends on, as nvidia-smi's --query-gpu names it. (The driver API's
clock attributes are the maximum rates, constant; the current ones come from NVML.)"""


def query_smi(pci_bus_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """`fields` (our name -> nvidia-smi query name) for the GPU at `pci_bus_id`."""
    import subprocess

    command = [
        "nvidia-smi",
        f"--id={pci_bus_id}",
        "--format=csv,noheader,nounits",
        "--query-gpu=" + ",".join(fields.values()),
    ]
    try:
        text = subprocess.run(
            command, capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    return parse_smi(text, list(fields))


def parse_smi(text: str, names: list[str]) -> dict[str, Any]:
    """One CSV line of nvidia-smi values as numbers (or text, e.g. "P0"); "[N/A]" and
    anything missing as None."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    values = [v.strip() for v in line.split(",")] if line else []
    if len(values) != len(names):
        return dict.fromkeys(names)

    def value(v: str) -> Any:
        if v.startswith("[") or not v:
            return None
        try:
            return int(v) if v.isdigit() else float(v)
        except ValueError:
            return v

    return {n: value(v) for n, v in zip(names, values, strict=True)}


@cache
def device() -> Device:
    """Device 0, initialized once; IrkitError(NO_DEVICE) when there is none."""
    try:
        drv = cuda_driver()
        (err,) = drv.cuInit(0)
    except Exception:  # noqa: BLE001 - no driver library raises from inside cuda-bindings
        raise IrkitError(NO_DEVICE) from None
    if err != drv.CUresult.CUDA_SUCCESS:
        raise IrkitError(NO_DEVICE)
    count = driver_call("cuDeviceGetCount", drv.cuDeviceGetCount())
    if count < 1:
        raise IrkitError(NO_DEVICE)
    handle = driver_call("cuDeviceGet", drv.cuDeviceGet(0))
    context = driver_call("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(handle))
    driver_call("cuCtxSetCurrent", drv.cuCtxSetCurrent(context))
    name = driver_call("cuDeviceGetName", drv.cuDeviceGetName(256, handle))
    bus = driver_call("cuDeviceGetPCIBusId", drv.cuDeviceGetPCIBusId(64, handle))
    dev = Device(0, handle, context, name.split(b"\0")[0].decode(), bus.split(b"\0")[0].decode(),
                 "", 0, 0, 0, int(driver_call("cuDriverGetVersion", drv.cuDriverGetVersion())))  # fmt: skip
    major = dev.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
    minor = dev.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
    dev.arch = f"sm_{major}{minor}"
    dev.max_threads = dev.attribute("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK")
    dev.max_shared = dev.attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    dev.l2_bytes = dev.attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
    dev.stream = driver_call("cuStreamCreate", drv.cuStreamCreate(0))
    return dev
