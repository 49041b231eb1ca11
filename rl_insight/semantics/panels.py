"""The Prometheus panel catalogue: one source for two views of the same numbers.

The built-in UI's engine / TransferQueue / hardware sections (the ingest server runs these queries
against its own Prometheus, scoped to one run) and the Grafana dashboards
(`tools/build_dashboards.py` only renders them, with dashboard variables) both come from `SECTIONS`
(and the verl-omni dashboard's `OMNI_SECTIONS`). A test renders both and compares them, so a query
fixed in one place is fixed in both. The trainer's metric families (`TRAINER_FAMILIES`) are here too:
Grafana draws one row per family, and the UI groups its metric charts by the same families (it reads
them from the server, `GET /api/v1/metric-families`).

Expressions are PromQL templates with two placeholders, replaced by plain string substitution
(PromQL's own braces make `str.format` unreadable):

- `<SEL>`: the label matchers of the scope, without braces. Grafana: `project=~"$project",
  experiment_name=~"$experiment_name"` (plus `replica=~"$replica"` in per-replica sections); the
  server: `project="…", experiment_name="…"` for the run.
- `<W>`: the rate window. Grafana: `$__rate_interval`; the server computes the same rule
  (max(step + scrape interval, 4 × scrape interval)) so both views show the same curves.

Metric names follow shared/reference/exporters-today.md: current names first, removed vLLM names
only as `or` fallbacks; engine names are matched as `vllm[:_]…` / `sglang[:_]…` because newer
prometheus-client versions escape the colon when Prometheus negotiates OpenMetrics. Stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from .names import sanitize_metric_name

SEL = "<SEL>"
WINDOW = "<W>"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""  # Grafana legend template: "p99 r{{replica}}"


@dataclass(frozen=True)
class Panel:
    id: str
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"  # a Grafana unit id; the UI formats the same ids
    description: str = ""
    stack: bool = False
    thresholds: tuple[tuple[float | None, str], ...] = ()
    kind: str = "timeseries"  # timeseries | heatmap (heatmaps are drawn by Grafana only)


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    probe: str  # a metric-name regex: the section has data for a run when any series matches it
    enable: str  # what turns this section on, shown when it is empty
    panels: tuple[Panel, ...] = field(default_factory=tuple)
    per_replica: bool = False  # Grafana adds its `$replica` variable to the scope
    variables: tuple[tuple[str, str], ...] = ()  # more (label, Grafana variable) pairs in Grafana's scope


@dataclass(frozen=True)
class TrainerFamily:
    """verl's trainer metrics of one family. `id` is the first word of their names (how the UI groups any metric,
    documented or not); `title` names the Grafana row; `key` families are open by default in the UI; `keys`: the
    same metrics as verl logs them, in the same order."""

    id: str
    title: str
    metrics: tuple[str, ...]
    key: bool = False
    keys: tuple[str, ...] = ()


def render(expr: str, selector: str, window: str) -> str:
    """The template with its placeholders filled in one pass: text substituted for one placeholder is never read
    for the other (a run named `acme<W>` stays `acme<W>` inside its quoted selector)."""
    return _PLACEHOLDER.sub(lambda m: selector if m.group(0) == SEL else window, expr)


_PLACEHOLDER = re.compile(re.escape(SEL) + "|" + re.escape(WINDOW))
_LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legend rendering: `{{label}}` becomes the label's value (empty when absent)."""
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), template).strip()


def quote(value: str) -> str:
    """A PromQL double-quoted string literal for a label value."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# ----------------------------------------------------------------------------- query helpers
def _n(engine: str, name: str) -> str:
    return f'__name__=~"{engine}[:_]{name}"'


def _rate(engine: str, name: str, by: str = "replica") -> str:
    return f"sum by ({by}) (rate({{{_n(engine, name)}, {SEL}}}[{WINDOW}]))"


def _quantile(q: float, engine: str, metric: str, fallback: str | None = None, by: str = "replica") -> str:
    # rate() drops __name__, so a current and a removed name are rated separately and joined with
    # `or` (the current name wins where both exist); one selector over both would be an error.
    buckets = f"sum by (le, {by}) (rate({{{_n(engine, metric + '_bucket')}, {SEL}}}[{WINDOW}]))"
    if fallback:
        buckets += f" or sum by (le, {by}) (rate({{{_n(engine, fallback + '_bucket')}, {SEL}}}[{WINDOW}]))"
    return f"histogram_quantile({q}, {buckets})"


def _p50_p99(engine: str, metric: str, fallback: str | None = None) -> tuple[Query, ...]:
    return (Query(_quantile(0.5, engine, metric, fallback), "p50 r{{replica}}"),
            Query(_quantile(0.99, engine, metric, fallback), "p99 r{{replica}}"))


_KV = ((None, "green"), (0.9, "orange"), (0.95, "red"))
_DISABLE_LOG_STATS = ("verl registers each rollout replica's /metrics when the engine logs stats: set "
                      "`actor_rollout_ref.rollout.disable_log_stats=False` (and `prometheus.enable=True`).")

VLLM = Section("vllm", "Rollout engine · vLLM", "vllm[:_]num_requests_running", _DISABLE_LOG_STATS, per_replica=True,
    panels=(
    Panel("vllm_requests", "Running and waiting requests", (
        Query(f"sum by (replica) ({{{_n('vllm', 'num_requests_running')}, {SEL}}})", "running r{{replica}}"),
        Query(f"sum by (replica) ({{{_n('vllm', 'num_requests_waiting')}, {SEL}}})", "waiting r{{replica}}")),
        description="Requests in the batch and in the queue per replica: waiting > 0 for long means the replica is "
                    "saturated."),
    Panel("vllm_kv_cache", "KV cache usage", (
        Query(f"max by (replica) ({{{_n('vllm', '(kv_cache_usage_perc|gpu_cache_usage_perc)')}, {SEL}}})",
            "r{{replica}}"),),
        unit="percentunit", thresholds=_KV,
        description="`kv_cache_usage_perc` (removed name `gpu_cache_usage_perc` as fallback). Near 1: preemptions "
                    "follow."),
    Panel("vllm_prefix_hit", "Prefix cache hit rate", (Query(
        f"({_rate('vllm', 'prefix_cache_hits_total')} or {_rate('vllm', 'gpu_prefix_cache_hits_total')}) / "
        f"({_rate('vllm', 'prefix_cache_queries_total')} or {_rate('vllm', 'gpu_prefix_cache_queries_total')})",
        "r{{replica}}"),), unit="percentunit",
        description="Hit tokens over queried tokens (`prefix_cache_*`; removed `gpu_prefix_cache_*` as fallback)."),
    Panel("vllm_tokens", "Token throughput", (
        Query(_rate("vllm", "generation_tokens_total"), "generation r{{replica}}"),
        Query(_rate("vllm", "prompt_tokens_total"), "prompt r{{replica}}"),
        Query(_rate("vllm", "prompt_tokens_cached_total"), "cached prompt r{{replica}}")), unit="tps",
        description="Generated, prefilled and cache-served prompt tokens per second per replica."),
    Panel("vllm_ttft", "Time to first token", _p50_p99("vllm", "time_to_first_token_seconds"), unit="s"),
    Panel("vllm_itl", "Inter-token latency (TPOT)", _p50_p99("vllm", "inter_token_latency_seconds",
                                                             "time_per_output_token_seconds"), unit="s",
          description="`inter_token_latency_seconds`; before vLLM 0.11 `time_per_output_token_seconds` (fallback)."),
    Panel("vllm_e2e", "End-to-end request latency", _p50_p99("vllm", "e2e_request_latency_seconds"), unit="s"),
    Panel("vllm_queue", "Queue time", (Query(_quantile(0.99, "vllm", "request_queue_time_seconds"),
        "p99 r{{replica}}"),),
          unit="s"),
    Panel("vllm_preemptions", "Preemptions", (Query(
        f"sum by (replica) (increase({{{_n('vllm', 'num_preemptions_total')}, {SEL}}}[{WINDOW}]))", "r{{replica}}"),),
        description="Requests evicted for lack of KV cache and recomputed later."),
    Panel("vllm_sleep", "Engine sleep state", (Query(
        f'max by (replica, sleep_state) ({{{_n("vllm", "engine_sleep_state")}, {SEL}}})',
            "{{sleep_state}} r{{replica}}"),),
        description="awake = 1 while serving; weights_offloaded / discard_all = 1 while asleep around weight sync "
                    "(RL)."),
    Panel("vllm_finish", "Finish reasons", (Query(_rate("vllm", "request_success_total", "finished_reason"),
                                                 "{{finished_reason}}"),), unit="reqps", stack=True,
          description="A rising `length` share means responses hit max_tokens (see response_length/clip_ratio)."),
    Panel("vllm_prefill_decode", "Prefill vs decode time (p50)", (
        Query(_quantile(0.5, "vllm", "request_prefill_time_seconds"), "prefill r{{replica}}"),
        Query(_quantile(0.5, "vllm", "request_decode_time_seconds"), "decode r{{replica}}")), unit="s"),
    Panel("vllm_spec", "Spec decode acceptance", (Query(
        f"sum(rate({{{_n('vllm', 'spec_decode_num_accepted_tokens_total')}, {SEL}}}[{WINDOW}])) / "
        f"sum(rate({{{_n('vllm', 'spec_decode_num_draft_tokens_total')}, {SEL}}}[{WINDOW}]))", "acceptance rate"),),
        unit="percentunit", description="Only with speculative decoding configured."),
    Panel("vllm_gen_len", "Generation length", (Query(
        f"sum by (le) (increase({{{_n('vllm', 'request_generation_tokens_bucket')}, {SEL}}}[{WINDOW}]))"),),
            kind="heatmap"),
    Panel("vllm_prompt_len", "Prompt length", (Query(
        f"sum by (le) (increase({{{_n('vllm', 'request_prompt_tokens_bucket')}, {SEL}}}[{WINDOW}]))"),),
            kind="heatmap"),
))

SGLANG = Section("sglang", "Rollout engine · SGLang", "sglang[:_]num_running_reqs",
                 _DISABLE_LOG_STATS + " SGLang also needs `--enable-metrics` (verl passes it).", per_replica=True,
                     panels=(
    Panel("sglang_requests", "Running and queued requests", (
        Query(f"sum by (replica) ({{{_n('sglang', 'num_running_reqs')}, {SEL}}})", "running r{{replica}}"),
        Query(f"sum by (replica) ({{{_n('sglang', 'num_queue_reqs')}, {SEL}}})", "queued r{{replica}}"),
        Query(f"sum by (replica) ({{{_n('sglang', 'num_paused_reqs')}, {SEL}}})", "paused r{{replica}}")),
        description="Paused requests wait for an asynchronous weight sync."),
    Panel("sglang_kv_cache", "KV cache (token) usage", (
        Query(f"max by (replica) ({{{_n('sglang', 'token_usage')}, {SEL}}})", "r{{replica}}"),), unit="percentunit",
        thresholds=_KV),
    Panel("sglang_prefix_hit", "Prefix cache hit rate", (Query(
        f"{_rate('sglang', 'cached_tokens_total')} / {_rate('sglang', 'prompt_tokens_total')}", "r{{replica}}"),),
        unit="percentunit",
        description="From the counters (cached over prompt tokens). SGLang's `cache_hit_rate` gauge is the last "
                    "prefill "
                    "batch's ratio and resets to 0 at every decode log, so averaging it reads low."),
    Panel("sglang_tokens", "Token throughput", (
        Query(_rate("sglang", "generation_tokens_total"), "generation r{{replica}}"),
        Query(_rate("sglang", "prompt_tokens_total"), "prompt r{{replica}}"),
        Query(_rate("sglang", "cached_tokens_total"), "cached prompt r{{replica}}")), unit="tps"),
    Panel("sglang_ttft", "Time to first token", _p50_p99("sglang", "time_to_first_token_seconds"), unit="s"),
    Panel("sglang_itl", "Inter-token latency", _p50_p99("sglang", "inter_token_latency_seconds"), unit="s"),
    Panel("sglang_e2e", "End-to-end request latency", _p50_p99("sglang", "e2e_request_latency_seconds"), unit="s"),
    Panel("sglang_queue", "Queue time", (Query(_quantile(0.99, "sglang", "queue_time_seconds"), "p99 r{{replica}}"),),
        unit="s"),
    Panel("sglang_retractions", "Retractions (preemptions)", (
        Query(f"sum by (replica) (increase({{{_n('sglang', 'num_retracted_requests_total')}, {SEL}}}[{WINDOW}]))",
              "retracted r{{replica}}"),
        Query(f"sum by (replica) (increase({{{_n('sglang', 'num_aborted_requests_total')}, {SEL}}}[{WINDOW}]))",
              "aborted r{{replica}}")),
        description="Requests retracted for lack of KV cache (SGLang's preemption) and aborted requests."),
))

TRANSFER_QUEUE = Section("transfer_queue", "TransferQueue", "tq_controller_uptime_seconds",
                         "TransferQueue exports metrics only when enabled: `transfer_queue.metrics.enabled=True` in "
                         "the "
                         "TransferQueue config (verl then registers the controller endpoint).", panels=(
    Panel("tq_requests", "Controller requests by op", (Query(
        f"sum by (op_type) (rate(tq_controller_request_total{{{SEL}}}[{WINDOW}]))", "{{op_type}}"),), unit="reqps"),
    Panel("tq_latency", "Controller request latency p99", (Query(
        "histogram_quantile(0.99, sum by (le, op_type) "
        f"(rate(tq_controller_request_duration_seconds_bucket{{{SEL}}}[{WINDOW}])))",
        "{{op_type}}"),), unit="s"),
    Panel("tq_produced_cleared", "Produced vs cleared samples", (
        Query(f'sum(rate(tq_controller_request_samples_total{{op_type="NOTIFY_DATA_UPDATE", {SEL}}}[{WINDOW}]))',
            "produced"),
        Query(f'sum(rate(tq_controller_request_samples_total{{op_type="CLEAR_META", {SEL}}}[{WINDOW}]))', "cleared")),
        description="Diverging lines mean samples are produced and never cleared: a TransferQueue leak (backlog)."),
    Panel("tq_errors", "Request errors", (Query(
        f"sum by (op_type) (rate(tq_controller_request_errors_total{{{SEL}}}[{WINDOW}]))", "{{op_type}}"),),
            unit="reqps"),
    Panel("tq_partitions", "Partitions and samples (gauges)", (
        Query(f"sum(tq_partitions_total{{{SEL}}})", "partitions"),
        Query(f"sum(tq_partition_samples_total{{{SEL}}})", "samples"))),
    Panel("tq_progress", "Partition progress", (
        Query(f"tq_partition_production_progress{{{SEL}}}", "produce {{partition_id}}/{{task_name}}"),
        Query(f"tq_partition_consumption_progress{{{SEL}}}", "consume {{partition_id}}/{{task_name}}")),
            unit="percentunit"),
    Panel("tq_storage_util", "Storage utilization", (Query(
        f"tq_storage_utilization_ratio{{{SEL}}}", "unit {{storage_unit_id}}"),), unit="percentunit",
        description="Absent when storage capacity is unlimited."),
    Panel("tq_storage_ops", "Storage ops", (Query(
        f"sum by (op_type) (rate(tq_storage_request_ops{{{SEL}}}[{WINDOW}]))", "{{op_type}}"),), unit="ops",
        description="`tq_storage_request_ops` is a gauge holding a cumulative count, so it is rated like a counter."),
    Panel("tq_storage_latency", "Storage latency p99", (Query(
        f"tq_storage_request_latency_p99{{{SEL}}}", "{{storage_unit_id}} {{op_type}}"),), unit="s",
        description="Quantile since the storage process started (a gauge)."),
    Panel("tq_memory", "Memory (RSS)", (
        Query(f"tq_controller_memory_rss_bytes{{{SEL}}}", "controller"),
        Query(f"tq_storage_memory_rss_bytes{{{SEL}}}", "storage {{storage_unit_id}}")), unit="bytes"),
))

# The node by name, not by scrape address: dcgm-exporter labels every series with its host (`hostname`; `Hostname`
# before it renamed the label: the absent one renders empty, in Grafana as here).
_GPU = "{{hostname}}{{Hostname}} gpu{{gpu}}"
GPU = Section("gpu", "GPUs (dcgm-exporter)", "DCGM_FI_DEV_GPU_UTIL",
              "Run NVIDIA dcgm-exporter on each node and register it: "
              "`rl-insight server targets add HOST:9400 --job dcgm --project P --experiment-name E`.", panels=(
    Panel("gpu_util", "GPU utilization", (Query(f"DCGM_FI_DEV_GPU_UTIL{{{SEL}}}", _GPU),), unit="percent"),
    Panel("gpu_engine_active", "Graphics engine active", (Query(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{SEL}}}", _GPU),),
          unit="percentunit", description="Fraction of time any kernel ran: the honest 'is the GPU busy'."),
    Panel("gpu_tensor_active", "Tensor core active", (Query(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{SEL}}}", _GPU),),
          unit="percentunit"),
    Panel("gpu_dram_active", "Memory bandwidth active", (Query(f"DCGM_FI_PROF_DRAM_ACTIVE{{{SEL}}}", _GPU),),
          unit="percentunit", description="High DRAM activity with low tensor activity: memory-bound (decode)."),
    Panel("gpu_fb_used", "Framebuffer used", (Query(f"DCGM_FI_DEV_FB_USED{{{SEL}}}", _GPU),), unit="decmbytes"),
    Panel("gpu_power", "Power", (Query(f"DCGM_FI_DEV_POWER_USAGE{{{SEL}}}", _GPU),), unit="watt"),
    Panel("gpu_temp", "Temperature", (Query(f"DCGM_FI_DEV_GPU_TEMP{{{SEL}}}", _GPU),), unit="celsius"),
    Panel("gpu_xid", "XID errors (last code)", (Query(f"max by (instance, gpu) (DCGM_FI_DEV_XID_ERRORS{{{SEL}}})",
        _GPU),),
          thresholds=((None, "green"), (1, "red"))),
))

_NPU = "{{instance}} npu{{id}}"
NPU = Section("npu", "NPUs (npu-exporter)", "npu_chip_info_utilization",
              "Run Ascend MindCluster npu-exporter on each node and register it: "
              "`rl-insight server targets add HOST:8082 --job npu --project P --experiment-name E`.", panels=(
    Panel("npu_util", "AI core utilization", (Query(f"npu_chip_info_utilization{{{SEL}}}", _NPU),), unit="percent"),
    Panel("npu_hbm_used", "HBM used", (Query(f"npu_chip_info_hbm_used_memory{{{SEL}}}", _NPU),), unit="decmbytes"),
    Panel("npu_hbm_util", "HBM utilization", (Query(f"npu_chip_info_hbm_utilization{{{SEL}}}", _NPU),), unit="percent"),
    Panel("npu_power", "Power", (Query(f"npu_chip_info_power{{{SEL}}}", _NPU),), unit="watt"),
    Panel("npu_temp", "Temperature", (Query(f"npu_chip_info_temperature{{{SEL}}}", _NPU),), unit="celsius"),
    Panel("npu_health", "Health (1 = healthy)", (Query(f"npu_chip_info_health_status{{{SEL}}}", _NPU),),
          thresholds=((None, "red"), (1, "green")),
          description="1 healthy, 0 unhealthy, 2147483647 unknown: anything but 1 needs a look."),
    Panel("npu_bandwidth", "Interface bandwidth", (Query(f"npu_chip_info_bandwidth_rx{{{SEL}}}", "rx " + _NPU),
                                                   Query(f"npu_chip_info_bandwidth_tx{{{SEL}}}", "tx " + _NPU)),
                                                       unit="MBs",
          description="Only on training cards."),
))

HOST = Section("host", "Hosts (node_exporter)", "node_cpu_seconds_total",
               "Run prometheus-node-exporter on each node and register it: "
               "`rl-insight server targets add HOST:9100 --job node --project P --experiment-name E`.", panels=(
    Panel("host_cpu", "CPU utilization", (Query(
        f'100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{{mode="idle", {SEL}}}[{WINDOW}])))',
            "{{instance}}"),),
        unit="percent"),
    Panel("host_memory", "Memory used", (Query(
        f"node_memory_MemTotal_bytes{{{SEL}}} - node_memory_MemAvailable_bytes{{{SEL}}}", "{{instance}}"),),
            unit="bytes"),
    Panel("host_load", "Load (1m)", (Query(f"node_load1{{{SEL}}}", "{{instance}}"),)),
    Panel("host_network", "Network", (
        Query(f'sum by (instance) (rate(node_network_receive_bytes_total{{device!="lo", {SEL}}}[{WINDOW}]))',
            "rx {{instance}}"),
        Query(f'sum by (instance) (rate(node_network_transmit_bytes_total{{device!="lo", {SEL}}}[{WINDOW}]))',
              "tx {{instance}}")), unit="Bps"),
    Panel("host_disk", "Disk I/O", (
        Query(f"sum by (instance) (rate(node_disk_read_bytes_total{{{SEL}}}[{WINDOW}]))", "read {{instance}}"),
        Query(f"sum by (instance) (rate(node_disk_written_bytes_total{{{SEL}}}[{WINDOW}]))", "write {{instance}}")),
        unit="Bps"),
    Panel("host_fs", "Filesystem free", (Query(
        f'node_filesystem_avail_bytes{{fstype!~"tmpfs|ramfs|squashfs", {SEL}}}', "{{instance}} {{mountpoint}}"),),
        unit="bytes"),
))

SECTIONS: tuple[Section, ...] = (VLLM, SGLANG, TRANSFER_QUEUE, GPU, NPU, HOST)
BY_ID: dict[str, Section] = {s.id: s for s in SECTIONS}


# ----------------------------------------------------------------------------- vLLM-Omni (the verl-omni dashboard)
def _omni(name: str) -> str:
    return f'__name__=~"vllm_omni[:_]{name}"'


def _omni_q(pct: float, metric: str, by: str = "stage, replica") -> str:
    return f"histogram_quantile({pct}, sum by (le, {by}) (rate({{{_omni(metric + '_bucket')}, {SEL}}}[{WINDOW}])))"


_OMNI_SCOPE = (("model_name", "omni_model_name"), ("stage", "stage"))
_OMNI_ENABLE = "verl-omni's vLLM-Omni rollout replicas register their /metrics (stage-labelled)"
OMNI_PIPELINE = Section("vllm_omni", "vLLM-Omni pipeline", "vllm_omni[:_]num_requests_running", _OMNI_ENABLE,
                        per_replica=True, variables=_OMNI_SCOPE, panels=(
    Panel("omni_requests", "Requests by stage", (
        Query(f"sum by (stage) ({{{_omni('num_requests_running')}, {SEL}}})", "running {{stage}}"),
        Query(f"sum by (stage) ({{{_omni('num_requests_waiting')}, {SEL}}})", "waiting {{stage}}"))),
    Panel("omni_tokens", "Token throughput by stage", (
        Query(f"sum by (stage) (rate({{{_omni('generation_tokens_total')}, {SEL}}}[{WINDOW}]))",
            "generation {{stage}}"),
        Query(f"sum by (stage) (rate({{{_omni('prompt_tokens_total')}, {SEL}}}[{WINDOW}]))", "prompt {{stage}}")),
        unit="tps"),
    Panel("omni_finished", "Finished requests by stage", (
        Query(f"sum by (stage) (rate({{{_omni('requests_success_total')}, {SEL}}}[{WINDOW}]))", "{{stage}}"),),
        unit="reqps"),
    Panel("omni_e2e", "End-to-end latency", (Query(_omni_q(0.5, "e2e_request_latency_s"), "p50 {{stage}} r{{replica}}"),
                                             Query(_omni_q(0.99, "e2e_request_latency_s"),
                                                 "p99 {{stage}} r{{replica}}")),
          unit="s"),
))
OMNI_DIFFUSION = Section("vllm_omni_diffusion", "vLLM-Omni diffusion", "vllm_omni[:_]diffusion_exec_s_bucket",
                         _OMNI_ENABLE, per_replica=True, variables=_OMNI_SCOPE, panels=(
    Panel("omni_diffusion", "Diffusion execution", (Query(_omni_q(0.5, "diffusion_exec_s"), "p50 r{{replica}}"),
                                                    Query(_omni_q(0.99, "diffusion_exec_s"), "p99 r{{replica}}")),
                                                        unit="s"),
    Panel("omni_denoise", "Time per denoising step", (Query(_omni_q(0.5, "diffusion_exec_per_step_s"),
        "p50 r{{replica}}"),),
          unit="s"),
    Panel("omni_breakdown", "Timing breakdown (p50)", (
        Query(_omni_q(0.5, "diffusion_preprocess_s", "replica"), "preprocess r{{replica}}"),
        Query(_omni_q(0.5, "diffusion_exec_s", "replica"), "execute r{{replica}}"),
        Query(_omni_q(0.5, "diffusion_postprocess_s", "replica"), "postprocess r{{replica}}")), unit="s", stack=True),
    Panel("omni_audio", "Audio time to first packet", (Query(_omni_q(0.5, "audio_ttfp_s"), "p50 r{{replica}}"),
                                                       Query(_omni_q(0.99, "audio_ttfp_s"), "p99 r{{replica}}")),
                                                           unit="s"),
))
OMNI_AR = Section("vllm_omni_ar", "vLLM-Omni AR stage (vLLM metrics with a stage label)",
    "vllm[:_]num_requests_running",
                  _OMNI_ENABLE, per_replica=True, variables=(("stage", "stage"),), panels=(
    Panel("omni_ar_running", "AR running requests", (
        Query(f"sum by (stage, replica) ({{{_n('vllm', 'num_requests_running')}, {SEL}}})", "{{stage}} r{{replica}}"),
            )),
    Panel("omni_ar_kv", "AR KV cache usage", (
        Query(f"max by (stage, replica) ({{{_n('vllm', 'kv_cache_usage_perc')}, {SEL}}})", "{{stage}} r{{replica}}"),),
        unit="percentunit"),
    Panel("omni_ar_tokens", "AR generation tokens/s", (Query(
        f"sum by (stage, replica) (rate({{{_n('vllm', 'generation_tokens_total')}, {SEL}}}[{WINDOW}]))",
        "{{stage}} r{{replica}}"),), unit="tps"),
    Panel("omni_ar_ttft", "AR time to first token", (Query(
        f"histogram_quantile(0.5, sum by (le, stage) (rate({{{_n('vllm', 'time_to_first_token_seconds_bucket')}, "
        f"{SEL}}}"
        f"[{WINDOW}])))", "p50 {{stage}}"),), unit="s"),
))
OMNI_SECTIONS: tuple[Section, ...] = (OMNI_PIPELINE, OMNI_DIFFUSION, OMNI_AR)


# ----------------------------------------------------------------------------- trainer metric families (verl)
def _each(prefix: str, keys: tuple[str, ...], suffixes: tuple[str, ...] = ("",)) -> tuple[str, ...]:
    return tuple(f"{prefix}{k}{s}" for k in keys for s in suffixes)


# In the order verl's docs list them (upstream-monitor.md §8.2), spelled as verl logs them (its console, W&B): verl
# replaces "/" with "_" before it calls rl_insight.metric_gauge (upstream-monitor.md §12), so a family's `metrics` are
# the stored names (`actor_entropy`, prefix off) and its `keys` how the UI names them again (`actor/entropy`).
def _family(id: str, title: str, keys: tuple[str, ...], key: bool = False) -> TrainerFamily:
    return TrainerFamily(id, title, tuple(sanitize_metric_name(k) for k in keys), key, keys)


TRAINER_FAMILIES: tuple[TrainerFamily, ...] = (
    _family("actor", "actor", _each("actor/", (
        "pg_loss", "loss", "entropy", "entropy_loss", "grad_norm", "kl_loss", "kl_coef", "ppo_kl", "pg_clipfrac",
        "pg_clipfrac_lower", "lr", "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb",
        "perf/cpu_memory_used_gb")), key=True),
    _family("critic", "critic", _each("critic/", ("score", "rewards", "advantages", "returns"),
                                      ("/mean", "/max", "/min")), key=True),
    _family("perf", "perf", ("perf/throughput", "perf/time_per_step", "perf/mfu/actor", "perf/total_num_tokens"),
            key=True),
    # not verl's own: the counts a job adds to complete the token ledger (semantics/token_ledger.py, docs/ledger.md)
    _family("tokens", "tokens (the token ledger)", _each("tokens/", ("generated", "filtered", "stale", "aborted"))),
    _family("groups", "groups (dynamic sampling)", ("groups/drawn", "groups/filtered")),
    _family("timing", "timing", _each("timing_s/", ("step", "gen", "old_log_prob", "ref", "update_actor",
                                                    "update_weights", "adv", "testing"))
            + _each("timing_per_token_ms/", ("gen", "ref", "update_actor", "adv")), key=True),
    _family("response", "response_length", _each("response_length/", ("mean", "max", "min", "clip_ratio"))
            + _each("response_length_non_aborted/", ("mean", "max", "min", "clip_ratio"))
            + ("response/aborted_ratio",)),
    _family("prompt", "prompt_length", _each("prompt_length/", ("mean", "max", "min", "clip_ratio"))),
    _family("global", "global_seqlen", _each("global_seqlen/", ("mean", "max", "min", "balanced_max", "balanced_min",
                                                                "minmax_diff"))),
    _family("rollout", "rollout_corr", _each("rollout_corr/", (
        "kl", "k3_kl", "chi2_token", "chi2_seq", "ppl_ratio", "log_ppl_diff", "log_ppl_abs_diff", "log_ppl_diff_max",
        "log_ppl_diff_min", "rollout_ppl", "training_ppl", "rollout_log_ppl", "training_log_ppl"))),
    _family("training", "training", _each("training/", (
        "global_step", "epoch", "rollout_probs_diff_mean", "rollout_probs_diff_max", "rollout_probs_diff_std",
        "rollout_probs_diff_valid", "rollout_actor_probs_pearson_corr"))
        + _each("training/num_turns/", ("mean", "max", "min"))
        + _each("training/off_policy_trajectory_", ("staleness/mean", "staleness/max", "staleness_worst/mean",
                                                     "staleness_worst/max", "staleness_worst/min", "spans/mean",
                                                     "spans/max", "spans/min"))),
    _family("val", "val", ("val-core/openai/gsm8k/acc/mean@1", "val-aux/openai/gsm8k/reward/mean@1",
                           "val-aux/num_turns/mean", "val-aux/num_turns/max", "val-aux/num_turns/min")),
)
VERL_KEYS: tuple[str, ...] = tuple(k for f in TRAINER_FAMILIES for k in f.keys)


@lru_cache(maxsize=1)
def logged_names() -> dict[str, str]:
    """Stored (sanitized) name -> verl's key, for every verl trainer metric."""
    return {m: k for f in TRAINER_FAMILIES for m, k in zip(f.metrics, f.keys)}


# The run page's first screen: one small chart per line, the first of its names the run logged (reward, what a
# step costs, how fast it goes, whether the policy still explores); names as exposed, the prefix off.
HEADLINE_METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("critic_score_mean", "critic_rewards_mean", "val_core_openai_gsm8k_acc_mean_1")),
    ("step time", ("timing_s_step", "perf_time_per_step")),
    ("throughput", ("perf_throughput",)),
    ("entropy", ("actor_entropy",)),
)
# verl-omni's trainer metrics beyond verl's (its dashboard's "training · omni" row)
OMNI_TRAINER_METRICS: tuple[str, ...] = (
    "actor_pg_clipfrac_higher", "actor_ratio_mean", "actor_ratio_std", "critic_reward_clap_mean",
    "critic_reward_imagebind_mean", "critic_reward_combined_mean", "critic_rewards_zero_std_ratio",
    "perf_total_num_images", "timing_per_image_ms_gen", "timing_per_image_ms_update_actor",
    "rollout_corr_logprob_abs_diff_mean")


def metric_names() -> set[str]:
    """Every metric name the catalogue's queries read (for the catalogue-vs-exporters test)."""
    out: set[str] = set()
    for s in SECTIONS:
        for p in s.panels:
            for q in p.queries:
                out |= _names_in(q.expr)
    return out


def _names_in(expr: str) -> set[str]:
    names = set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_:]*)\{", expr))
    for engine, alternatives in re.findall(r'__name__=~"(\w+)\[:_\]([^"]+)"', expr):
        alts = alternatives.strip("()").split("|")
        names |= {f"{engine}:{a}" for a in alts}
    return names
