"""Stand-in NVIDIA dcgm-exporter and Ascend npu-exporter (MindCluster) with their real names and labels."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Gauge

from .endpoint import MetricsEndpoint


class DcgmStandIn:
    """dcgm-exporter default counters (+ DCP profiling); labels gpu, UUID, pci_bus_id, device, modelName, hostname
    (`Hostname` before dcgm-exporter renamed it), DCGM_FI_DRIVER_VERSION; XID errors also carry err_code, err_msg."""

    def __init__(self, gpus: int, hostname: str = "demo-node-0") -> None:
        r = self.registry = CollectorRegistry()
        lab = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION"]
        self._labels = [
            (
                str(i),
                f"GPU-demo-{i:04d}",
                f"00000000:{0x18 + i:02X}:00.0",
                f"nvidia{i}",
                "NVIDIA H100 80GB HBM3",
                hostname,
                "570.124.06",
            )
            for i in range(gpus)
        ]
        self._xid: dict[int, int] = {}
        g = lambda n, d: Gauge(n, d, lab, registry=r)  # noqa: E731 - one-line constructors, a table read where it is used
        self.util = g("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
        self.mem_copy = g("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).")
        self.fb_used = g("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
        self.fb_free = g("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
        self.temp = g("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
        self.mem_temp = g("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).")
        self.power = g("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")
        self.sm_clock = g("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).")
        self.xid = Gauge(
            "DCGM_FI_DEV_XID_ERRORS",
            "Value of the last XID error encountered.",
            lab + ["err_code", "err_msg"],
            registry=r,
        )
        self.gr_active = g("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.")
        self.tensor_active = g("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.")
        self.dram_active = g("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active.")
        self.energy = Counter(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", lab, registry=r
        )
        self.nvlink = Counter("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total NVLink bandwidth counter.", lab, registry=r)
        self.endpoint = MetricsEndpoint(r)
        self.address = self.endpoint.address
        self.tick(0.0, 1.0)

    def tick(self, busy: float, dt: float) -> None:
        """`busy` in [0, 1]: the fraction of the last `dt` seconds the GPUs computed."""
        for i, lab in enumerate(self._labels):
            u = max(0.0, min(100.0, 100 * busy + random.uniform(-4, 4)))
            self.util.labels(*lab).set(round(u))
            self.mem_copy.labels(*lab).set(round(u * 0.4))
            used = 52_000 + 20_000 * busy + random.uniform(-500, 500)
            self.fb_used.labels(*lab).set(round(used))
            self.fb_free.labels(*lab).set(round(81_559 - used))
            self.temp.labels(*lab).set(round(38 + 30 * busy))
            self.mem_temp.labels(*lab).set(round(40 + 25 * busy))
            watts = 90 + 520 * busy
            self.power.labels(*lab).set(round(watts, 1))
            self.sm_clock.labels(*lab).set(1980 if busy > 0.1 else 345)
            code = self._xid.get(i, 0)
            self.xid.labels(*lab, str(code), "GPU has fallen off the bus" if code == 79 else "No Error").set(code)
            self.gr_active.labels(*lab).set(round(0.95 * busy, 3))
            self.tensor_active.labels(*lab).set(round(0.55 * busy, 3))
            self.dram_active.labels(*lab).set(round(0.45 * busy, 3))
            self.energy.labels(*lab).inc(watts * dt * 1000)
            self.nvlink.labels(*lab).inc(int(2e9 * busy * dt))

    def inject_xid(self, gpu: int, code: int = 79) -> None:
        """Fault injection for the demo (`--fault xid`): the GPU reports an XID error from now on."""
        self.xid.clear()
        self._xid[gpu] = code

    def close(self) -> None:
        self.endpoint.close()


class NpuStandIn:
    """MindCluster npu-exporter chip metrics (910-series units: HBM in MB); labels id, model_name, vdie_id,
    pcie_bus_info,
    namespace, pod_name, container_name. Health: 1 healthy, 0 unhealthy, 2147483647 unknown."""

    def __init__(self, chips: int) -> None:
        r = self.registry = CollectorRegistry()
        lab = ["id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name"]
        self._labels = [
            (str(i), "Ascend910B4", f"vdie-{i}", f"0000:{0xC1 + i:02X}:00.0", "", "", "") for i in range(chips)
        ]
        self._health: dict[int, int] = {}
        g = lambda n, d, extra=(): Gauge(n, d, lab + list(extra), registry=r)  # noqa: E731 - one-line constructors, a table read where it is used
        self.util = g("npu_chip_info_utilization", "the ai core utilization")
        self.hbm_used = g("npu_chip_info_hbm_used_memory", "the npu hbm used memory (MB)")
        self.hbm_total = g("npu_chip_info_hbm_total_memory", "the npu hbm total memory (MB)")
        self.hbm_util = g("npu_chip_info_hbm_utilization", "the npu hbm utilization")
        self.hbm_bw = g("npu_chip_info_hbm_bandwidth_utilization", "the npu hbm bandwidth utilization")
        self.temp = g("npu_chip_info_temperature", "the npu temperature")
        self.power = g("npu_chip_info_power", "the npu power")
        self.voltage = g("npu_chip_info_voltage", "the npu voltage")
        self.health = g("npu_chip_info_health_status", "the npu health status (1 healthy, 0 unhealthy)")
        self.error = g("npu_chip_info_error_code", "the npu error code")
        self.bw_rx = g("npu_chip_info_bandwidth_rx", "the npu interface receive speed (MB/s)")
        self.bw_tx = g("npu_chip_info_bandwidth_tx", "the npu interface transport speed (MB/s)")
        # npu_chip_info_name carries `name` instead of `model_name`
        self.name = Gauge(
            "npu_chip_info_name", "the npu name", [x if x != "model_name" else "name" for x in lab], registry=r
        )
        for lab_values in self._labels:
            self.name.labels(*lab_values).set(1)
            self.hbm_total.labels(*lab_values).set(65_536)
        self.endpoint = MetricsEndpoint(r)
        self.address = self.endpoint.address
        self.tick(0.0)

    def tick(self, busy: float) -> None:
        for i, lab in enumerate(self._labels):
            u = max(0.0, min(100.0, 100 * busy + random.uniform(-3, 3)))
            self.util.labels(*lab).set(round(u))
            used = 30_000 + 28_000 * busy
            self.hbm_used.labels(*lab).set(round(used))
            self.hbm_util.labels(*lab).set(round(100 * used / 65_536))
            self.hbm_bw.labels(*lab).set(round(60 * busy))
            self.temp.labels(*lab).set(round(42 + 25 * busy))
            self.power.labels(*lab).set(round(95 + 240 * busy, 1))
            self.voltage.labels(*lab).set(0.86)
            self.health.labels(*lab).set(self._health.get(i, 1))
            self.error.labels(*lab).set(0 if self._health.get(i, 1) == 1 else 0x80E18400)
            self.bw_rx.labels(*lab).set(round(2000 * busy))
            self.bw_tx.labels(*lab).set(round(1800 * busy))

    def inject_unhealthy(self, chip: int, status: int = 0) -> None:
        """Fault injection for the demo (`--fault npu`): the chip reports `status` (0 unhealthy) from now on."""
        self._health[chip] = status

    def close(self) -> None:
        self.endpoint.close()
