"""Metric names of the exporters rl-insight's dashboards and rules read (ecosystem.md §2).

A test checks that every metric name a dashboard or rule references is either produced by
rl-insight itself (client, server, recording rules, the demo's trainer keys) or listed here, so a
renamed metric cannot silently blank a panel. docs/dashboards.md lists the same catalog.
"""

from __future__ import annotations

EXPORTERS: dict[str, list[str]] = {
    "vLLM (V1, `vllm:` prefix; newer prometheus-client escapes it to `vllm_`)": [
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total", "vllm:generation_tokens_total",
        "vllm:request_success_total", "vllm:engine_sleep_state", "vllm:request_prompt_tokens_bucket",
        "vllm:request_generation_tokens_bucket", "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket", "vllm:request_time_per_output_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket", "vllm:request_queue_time_seconds_bucket",
        "vllm:request_prefill_time_seconds_bucket", "vllm:request_decode_time_seconds_bucket",
        "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    ],
    "SGLang (`--enable-metrics`)": [
        "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:num_paused_reqs", "sglang:num_retracted_reqs",
        "sglang:token_usage", "sglang:gen_throughput", "sglang:cache_hit_rate", "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total", "sglang:cached_tokens_total", "sglang:num_aborted_requests_total",
        "sglang:num_retracted_requests_total", "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket", "sglang:e2e_request_latency_seconds_bucket",
        "sglang:queue_time_seconds_bucket",
    ],
    "vLLM-Omni (`vllm_omni:` prefix, label `stage`; its AR stage's `vllm:` metrics carry `stage` too)": [
        "vllm_omni:num_requests_running", "vllm_omni:num_requests_waiting", "vllm_omni:prompt_tokens_total",
        "vllm_omni:generation_tokens_total", "vllm_omni:requests_success_total",
            "vllm_omni:e2e_request_latency_s_bucket",
        "vllm_omni:diffusion_exec_s_bucket", "vllm_omni:diffusion_exec_s_count",
            "vllm_omni:diffusion_exec_per_step_s_bucket",
        "vllm_omni:diffusion_preprocess_s_bucket", "vllm_omni:diffusion_postprocess_s_bucket",
        "vllm_omni:audio_ttfp_s_bucket", "vllm_omni:audio_ttfp_s_count",
    ],
    "verl-omni trainer keys (the demo emits them with `--engine vllm-omni`)": [
        "rl_insight_monitor_actor_pg_clipfrac_higher", "rl_insight_monitor_actor_ratio_mean",
            "rl_insight_monitor_actor_ratio_std",
        "rl_insight_monitor_critic_reward_clap_mean", "rl_insight_monitor_critic_reward_imagebind_mean",
        "rl_insight_monitor_critic_reward_combined_mean", "rl_insight_monitor_critic_rewards_zero_std_ratio",
        "rl_insight_monitor_perf_total_num_images", "rl_insight_monitor_timing_per_image_ms_gen",
        "rl_insight_monitor_timing_per_image_ms_update_actor", "rl_insight_monitor_rollout_corr_logprob_abs_diff_mean",
    ],
    "TransferQueue controller (`_total` gauges marked *)": [
        "tq_controller_uptime_seconds", "tq_controller_memory_rss_bytes", "tq_partitions_total*",
        "tq_partition_samples_total*", "tq_partition_production_progress", "tq_partition_consumption_progress",
        "tq_global_index_allocated_total*", "tq_global_index_reusable_total*", "tq_controller_request_total",
        "tq_controller_request_errors_total", "tq_controller_request_samples_total",
        "tq_controller_request_duration_seconds_bucket", "tq_storage_capacity_total*", "tq_storage_active_keys_total*",
        "tq_storage_utilization_ratio", "tq_storage_memory_rss_bytes", "tq_storage_request_ops",
        "tq_storage_request_latency_p99",
    ],
    "node_exporter": [
        "node_cpu_seconds_total", "node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes", "node_load1",
        "node_network_receive_bytes_total", "node_network_transmit_bytes_total", "node_disk_read_bytes_total",
        "node_disk_written_bytes_total", "node_filesystem_avail_bytes",
    ],
    "NVIDIA dcgm-exporter": [
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS",
    ],
    "Ascend npu-exporter (MindCluster)": [
        "npu_chip_info_utilization", "npu_chip_info_hbm_used_memory", "npu_chip_info_hbm_utilization",
        "npu_chip_info_power", "npu_chip_info_temperature", "npu_chip_info_health_status",
        "npu_chip_info_bandwidth_rx", "npu_chip_info_bandwidth_tx",
    ],
    "Prometheus": ["up", "ALERTS"],
    "upstream's quick start example (`metric_count`, `metric_gauge`, `metric_histogram`; the demo emits them)": [
        "rl_insight_monitor_train_step_total", "rl_insight_monitor_reward_mean",
            "rl_insight_monitor_step_latency_ms_bucket",
    ],
}

# Names vLLM no longer exposes (shared/reference/exporters-today.md): read only as `or` fallbacks
# for engines of the deprecation window, never listed as exposed.
REMOVED_FALLBACKS: list[str] = [
    "vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
    "vllm:time_per_output_token_seconds_bucket",
]

# `_total` names that are gauges: never rate() / increase() them.
GAUGES_NAMED_TOTAL = sorted(n.rstrip("*") for names in EXPORTERS.values() for n in names if n.endswith("*"))


# What every training process reports about itself (client/batching.py `_add_self_metrics`), as /metrics shows it;
# labels pid and host, `reason` on events_dropped, `metric` on nonfinite_values (rule RLInsightNonFiniteMetric)
CLIENT_SELF_METRICS = ("rl_insight_client_events_sent_total", "rl_insight_client_batches_sent_total",
                       "rl_insight_client_send_retries_total", "rl_insight_client_queue_depth",
                       "rl_insight_client_events_dropped_total", "rl_insight_client_turns_sampled_out_total",
                       "rl_insight_client_trajectories_sampled_out_total", "rl_insight_client_nonfinite_values_total")


def exporter_metric_names() -> set[str]:
    """Every cataloged name, in both spellings of colon names (`vllm:x` and `vllm_x`)."""
    out: set[str] = set()
    for names in [*EXPORTERS.values(), REMOVED_FALLBACKS]:
        for n in names:
            n = n.rstrip("*")
            out.add(n)
            out.add(n.replace(":", "_"))
    return out
