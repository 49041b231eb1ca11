"""Stand-in NVIDIA dcgm-exporter and Ascend npu-exporter (MindCluster) with their real names and labels."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Gauge

from .endpoint import MetricsEndpoint


class DcgmStandIn:
    """dcgm-exporter default counters (+ DCP profiling); labels gpu, UUID, device, modelName, Hostname."""

    def __init__(self, gpus: int, hostname: str = "demo-node-0") -> None:
        r = self.registry = CollectorRegistry()
        lab = ["gpu", "UUID", "device", "modelName", "Hostname"]
        self._labels = [(str(i), f"GPU-demo-{i:04d}", f"nvidia{i}", "NVIDIA H100 80GB HBM3", hostname) for i in range(gpus)]
        g = lambda n, d: Gauge(n, d, lab, registry=r)  # noqa: E731
        self.util = g("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
        self.mem_copy = g("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).")
        self.fb_used = g("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
        self.fb_free = g("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
        self.temp = g("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
        self.mem_temp = g("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).")
        self.power = g("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")
        self.sm_clock = g("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).")
        self.xid = g("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
        self.gr_active = g("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.")
        self.tensor_active = g("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.")
        self.dram_active = g("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active.")
        self.energy = Counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", lab,
                              registry=r)
        self.nvlink = Counter("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total NVLink bandwidth counter.", lab, registry=r)
        self.endpoint = MetricsEndpoint(r)
        self.address = self.endpoint.address
        self.tick(0.0, 1.0)

    def tick(self, busy: float, dt: float) -> None:
        """`busy` in [0, 1]: the fraction of the last `dt` seconds the GPUs computed."""
        for lab in self._labels:
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
            self.xid.labels(*lab).set(0)
            self.gr_active.labels(*lab).set(round(0.95 * busy, 3))
            self.tensor_active.labels(*lab).set(round(0.55 * busy, 3))
            self.dram_active.labels(*lab).set(round(0.45 * busy, 3))
            self.energy.labels(*lab).inc(watts * dt * 1000)
            self.nvlink.labels(*lab).inc(int(2e9 * busy * dt))

    def close(self) -> None:
        self.endpoint.close()


class NpuStandIn:
    """MindCluster npu-exporter chip metrics (910-series units: HBM in MB); labels id, model_name, vdie_id."""

    def __init__(self, chips: int) -> None:
        r = self.registry = CollectorRegistry()
        lab = ["id", "model_name", "vdie_id"]
        self._labels = [(str(i), "Ascend910B4", f"vdie-{i}") for i in range(chips)]
        g = lambda n, d, extra=(): Gauge(n, d, lab + list(extra), registry=r)  # noqa: E731
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
        self.name = g("npu_chip_info_name", "the npu name", ["name"])
        for lab_values in self._labels:
            self.name.labels(*lab_values, f"Ascend910B4-{lab_values[0]}").set(1)
            self.hbm_total.labels(*lab_values).set(65_536)
        self.endpoint = MetricsEndpoint(r)
        self.address = self.endpoint.address
        self.tick(0.0)

    def tick(self, busy: float) -> None:
        for lab in self._labels:
            u = max(0.0, min(100.0, 100 * busy + random.uniform(-3, 3)))
            self.util.labels(*lab).set(round(u))
            used = 30_000 + 28_000 * busy
            self.hbm_used.labels(*lab).set(round(used))
            self.hbm_util.labels(*lab).set(round(100 * used / 65_536))
            self.hbm_bw.labels(*lab).set(round(60 * busy))
            self.temp.labels(*lab).set(round(42 + 25 * busy))
            self.power.labels(*lab).set(round(95 + 240 * busy, 1))
            self.voltage.labels(*lab).set(0.86)
            self.health.labels(*lab).set(1)
            self.error.labels(*lab).set(0)
            self.bw_rx.labels(*lab).set(round(2000 * busy))
            self.bw_tx.labels(*lab).set(round(1800 * busy))

    def close(self) -> None:
        self.endpoint.close()
