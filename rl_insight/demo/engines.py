"""Stand-in rollout engines with the real metric names, types and labels of vLLM (V1) and SGLang."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .endpoint import MetricsEndpoint

_LATENCY = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
_TOKENS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_ITL = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0)


@dataclass
class Request:
    prompt_tokens: int
    generation_tokens: int
    ttft_s: float
    itl_s: float
    e2e_s: float
    queue_s: float
    prefill_s: float
    decode_s: float
    cached_tokens: int
    finished_reason: str  # stop | length | abort


class VllmStandIn:
    """vLLM V1 `PrometheusStatLogger` names; labels `model_name`, `engine`. Emits the deprecated names too,
    as vLLM did during their deprecation window."""

    engine = "vllm"
    state_name = "vllm_generate"

    def __init__(self, model: str = "Qwen2.5-7B-Instruct", engine_index: int = 0) -> None:
        r = self.registry = CollectorRegistry()
        lab = ["model_name", "engine"]
        self._l = (model, str(engine_index))
        g = lambda n, d: Gauge(n, d, lab, registry=r).labels(*self._l)  # noqa: E731 - one-line constructors, a table read where it is used
        c = lambda n, d, extra=(): Counter(n, d, lab + list(extra), registry=r)  # noqa: E731 - one-line constructors, a table read where it is used
        h = lambda n, d, b: Histogram(n, d, lab, buckets=b, registry=r).labels(*self._l)  # noqa: E731 - one-line constructors, a table read where it is used
        self.running = g("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = g("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv = g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.kv_old = g("vllm:gpu_cache_usage_perc", "GPU KV-cache usage (deprecated name).")
        self.prefix_queries = c("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.").labels(*self._l)
        self.prefix_hits = c("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.").labels(*self._l)
        self.preemptions = c("vllm:num_preemptions", "Cumulative number of preemptions.").labels(*self._l)
        self.prompt_tokens = c("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(*self._l)
        self.prompt_cached = c(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        ).labels(*self._l)
        self.generation_tokens = c("vllm:generation_tokens", "Number of generation tokens processed.").labels(*self._l)
        self.success = c("vllm:request_success", "Count of successfully processed requests.", ["finished_reason"])
        self.spec_drafts = c("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.").labels(*self._l)
        self.spec_draft_tokens = c("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.").labels(*self._l)
        self.spec_accepted = c("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.").labels(*self._l)
        self.h_prompt = h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKENS)
        self.h_gen = h("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKENS)
        self.h_max_gen = h(
            "vllm:request_max_num_generation_tokens", "Max generation tokens in sequence group.", _TOKENS
        )
        self.h_iter = h("vllm:iteration_tokens_total", "Tokens per engine step.", _TOKENS)
        self.h_ttft = h("vllm:time_to_first_token_seconds", "Time to first token in seconds.", _LATENCY)
        self.h_itl = h("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", _ITL)
        self.h_tpot_old = h("vllm:time_per_output_token_seconds", "Time per output token (deprecated name).", _ITL)
        self.h_req_tpot = h("vllm:request_time_per_output_token_seconds", "Per-request time per output token.", _ITL)
        self.h_e2e = h("vllm:e2e_request_latency_seconds", "End to end request latency in seconds.", _LATENCY)
        self.h_queue = h("vllm:request_queue_time_seconds", "Time spent in WAITING phase.", _LATENCY)
        self.h_infer = h("vllm:request_inference_time_seconds", "Time spent in RUNNING phase.", _LATENCY)
        self.h_prefill = h("vllm:request_prefill_time_seconds", "Time spent in PREFILL phase.", _LATENCY)
        self.h_decode = h("vllm:request_decode_time_seconds", "Time spent in DECODE phase.", _LATENCY)
        sleep = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 1 means engine is awake; weights_offloaded = 1 "
            "means sleep level 1; discard_all = 1 means sleep level 2.",
            lab + ["sleep_state"],
            registry=r,
        )
        self.sleep_state = {s: sleep.labels(*self._l, s) for s in ("awake", "weights_offloaded", "discard_all")}
        self.wake()
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            ["block_size", "gpu_memory_utilization"],
            registry=r,
        )
        info.labels("16", "0.9").set(1)
        self.endpoint = MetricsEndpoint(r)
        self.address = self.endpoint.address

    def set_load(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv.set(kv_usage)
        self.kv_old.set(kv_usage)

    def sleep(self) -> None:
        """verl's free_cache_engine: level 1 sleep (weights offloaded) around the weight sync."""
        for state, gauge in self.sleep_state.items():
            gauge.set(1 if state == "weights_offloaded" else 0)

    def wake(self) -> None:
        for state, gauge in self.sleep_state.items():
            gauge.set(1 if state == "awake" else 0)

    def record(self, req: Request, rng_preempt: bool) -> None:
        self.prompt_tokens.inc(req.prompt_tokens)
        self.generation_tokens.inc(req.generation_tokens)
        self.prefix_queries.inc(req.prompt_tokens)
        self.prefix_hits.inc(req.cached_tokens)
        self.prompt_cached.inc(req.cached_tokens)
        self.success.labels(*self._l, req.finished_reason).inc()
        if rng_preempt:
            self.preemptions.inc()
        drafts = max(1, req.generation_tokens // 4)
        self.spec_drafts.inc(drafts)
        self.spec_draft_tokens.inc(drafts * 3)
        self.spec_accepted.inc(int(drafts * 3 * 0.7))
        self.h_prompt.observe(req.prompt_tokens)
        self.h_gen.observe(req.generation_tokens)
        self.h_max_gen.observe(req.generation_tokens)
        self.h_iter.observe(req.prompt_tokens + req.generation_tokens)
        self.h_ttft.observe(req.ttft_s)
        self.h_itl.observe(req.itl_s)
        self.h_tpot_old.observe(req.itl_s)
        self.h_req_tpot.observe(req.itl_s)
        self.h_e2e.observe(req.e2e_s)
        self.h_queue.observe(req.queue_s)
        self.h_infer.observe(req.prefill_s + req.decode_s)
        self.h_prefill.observe(req.prefill_s)
        self.h_decode.observe(req.decode_s)

    def close(self) -> None:
        self.endpoint.close()


class SglangStandIn:
    """SGLang scheduler/tokenizer collector names (`--enable-metrics`); scheduler labels `model_name, engine_type,
    tp_rank, pp_rank, moe_ep_rank`. Like SGLang, `cache_hit_rate` is the last prefill batch's ratio and is reset
    to 0 at every decode log; the true hit rate comes from `cached_tokens_total` (label `cache_source`)."""

    engine = "sglang"
    state_name = "sglang_generate"

    def __init__(self, model: str = "Qwen2.5-7B-Instruct", engine_index: int = 0) -> None:
        r = self.registry = CollectorRegistry()
        lab = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        self._l = (model, "unified", "0", "0", "0")
        g = lambda n, d: Gauge(n, d, lab, registry=r).labels(*self._l)  # noqa: E731 - one-line constructors, a table read where it is used
        c = lambda n, d: Counter(n, d, lab, registry=r).labels(*self._l)  # noqa: E731 - one-line constructors, a table read where it is used
        h = lambda n, d, b: Histogram(n, d, lab, buckets=b, registry=r).labels(*self._l)  # noqa: E731 - one-line constructors, a table read where it is used
        self.running = g("sglang:num_running_reqs", "The number of running requests.")
        self.queue = g("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.used_tokens = g("sglang:num_used_tokens", "The number of used tokens.")
        self.token_usage = g("sglang:token_usage", "The token usage.")
        self.max_tokens = g("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.")
        self.gen_throughput = g("sglang:gen_throughput", "The generation throughput (token/s).")
        self.cache_hit_rate = g("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.spec_accept_length = g("sglang:spec_accept_length", "The average acceptance length of speculative "
                                                                 "decoding.")
        self.prompt_tokens = c("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = c("sglang:generation_tokens", "Number of generation tokens processed.")
        self.paused = g("sglang:num_paused_reqs", "The number of paused requests by async weight sync.")
        self.retracted = g("sglang:num_retracted_reqs", "The number of retracted requests.")
        self.cached_tokens = Counter("sglang:cached_tokens", "Number of cached prompt tokens.", lab + ["cache_source"],
                                     registry=r).labels(*self._l, "device")
        self.retractions = c("sglang:num_retracted_requests", "Number of retracted requests.")
        self.num_requests = c("sglang:num_requests", "Number of requests processed.")
        self.aborted = c("sglang:num_aborted_requests", "Number of requests aborted.")
        self.h_ttft = h("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _LATENCY)
        self.h_itl = h("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _ITL)
        self.h_e2e = h(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", _LATENCY
        )
        self.h_queue = h("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", _LATENCY)
        self.max_tokens.set(262_144)
        self.endpoint = MetricsEndpoint(r)
        self.address = self.endpoint.address

    def set_load(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.queue.set(waiting)
        self.token_usage.set(kv_usage)
        self.used_tokens.set(int(kv_usage * 262_144))
        self.retracted.set(1 if kv_usage > 0.95 else 0)
        self.gen_throughput.set(running * 45.0)
        self._waiting = waiting

    def sleep(self) -> None:
        """Requests that arrive during an asynchronous weight sync are paused."""
        self.paused.set(getattr(self, "_waiting", 0))

    def wake(self) -> None:
        self.paused.set(0)

    def record(self, req: Request, rng_preempt: bool) -> None:
        self.prompt_tokens.inc(req.prompt_tokens)
        self.generation_tokens.inc(req.generation_tokens)
        self.cached_tokens.inc(req.cached_tokens)
        self.num_requests.inc()
        if req.finished_reason == "abort":
            self.aborted.inc()
        if rng_preempt:
            self.retractions.inc()
        # the last prefill batch's ratio, then reset by the next decode log (why panels use the counters)
        self.cache_hit_rate.set(req.cached_tokens / max(1, req.prompt_tokens) if req.generation_tokens % 2 else 0.0)
        self.h_queue.observe(req.queue_s)
        self.spec_accept_length.set(2.1)
        self.h_ttft.observe(req.ttft_s)
        self.h_itl.observe(req.itl_s)
        self.h_e2e.observe(req.e2e_s)

    def close(self) -> None:
        self.endpoint.close()


_DIFFUSION = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
_PER_STEP = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class VllmOmniStandIn:
    """vLLM-Omni (multi-stage omni-modal serving): pipeline metrics `vllm_omni:*` per `stage`, a diffusion
    stage (`vllm_omni:diffusion_*`), audio time-to-first-packet, and the AR stage's wrapped `vllm:` metrics
    with a `stage` label. Labels `model_name`, `stage`."""

    engine = "vllm-omni"
    state_name = "omni_generate"
    stages = ("ar", "diffusion")

    def __init__(self, model: str = "Qwen2.5-Omni-7B", engine_index: int = 0) -> None:
        r = self.registry = CollectorRegistry()
        lab = ["model_name", "stage"]
        self._m = model
        g = lambda n, d: Gauge(n, d, lab, registry=r)  # noqa: E731 - one-line constructors, a table read where it is used
        c = lambda n, d: Counter(n, d, lab, registry=r)  # noqa: E731 - one-line constructors, a table read where it is used
        h = lambda n, d, b: Histogram(n, d, lab, buckets=b, registry=r)  # noqa: E731 - one-line constructors, a table read where it is used
        self.running = g("vllm_omni:num_requests_running", "Requests running in each pipeline stage.")
        self.waiting = g("vllm_omni:num_requests_waiting", "Requests waiting in each pipeline stage.")
        self.prompt_tokens = c("vllm_omni:prompt_tokens", "Prompt tokens processed per stage.")
        self.generation_tokens = c("vllm_omni:generation_tokens", "Tokens generated per stage.")
        self.success = c("vllm_omni:requests_success", "Requests finished per stage.")
        self.h_e2e = h("vllm_omni:e2e_request_latency_s", "End-to-end request latency through the pipeline.", _LATENCY)
        self.h_exec = h("vllm_omni:diffusion_exec_s", "Diffusion execution time per request.", _DIFFUSION)
        self.h_step = h("vllm_omni:diffusion_exec_per_step_s", "Diffusion time per denoising step.", _PER_STEP)
        self.h_pre = h("vllm_omni:diffusion_preprocess_s", "Diffusion preprocessing time.", _PER_STEP)
        self.h_post = h("vllm_omni:diffusion_postprocess_s", "Diffusion postprocessing (decode) time.", _PER_STEP)
        self.h_ttfp = h("vllm_omni:audio_ttfp_s", "Audio time to first packet.", _LATENCY)
        # the AR stage is a vLLM engine: its metrics, wrapped with the stage label
        self.ar_running = g("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.ar_kv = g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.ar_gen = c("vllm:generation_tokens", "Number of generation tokens processed.")
        self.ar_ttft = h("vllm:time_to_first_token_seconds", "Time to first token in seconds.", _LATENCY)
        self.ar_e2e = h("vllm:e2e_request_latency_seconds", "End to end request latency in seconds.", _LATENCY)
        self.endpoint = MetricsEndpoint(r)
        self.address = self.endpoint.address

    def set_load(self, running: int, waiting: int, kv_usage: float) -> None:
        ar, dit = max(0, running - running // 2), running // 2
        self.running.labels(self._m, "ar").set(ar)
        self.running.labels(self._m, "diffusion").set(dit)
        self.waiting.labels(self._m, "ar").set(waiting)
        self.waiting.labels(self._m, "diffusion").set(0)
        self.ar_running.labels(self._m, "ar").set(ar)
        self.ar_kv.labels(self._m, "ar").set(kv_usage)

    def record(self, req: Request, rng_preempt: bool) -> None:
        m = self._m
        steps = 20
        exec_s = req.decode_s * 1.5
        self.prompt_tokens.labels(m, "ar").inc(req.prompt_tokens)
        self.generation_tokens.labels(m, "ar").inc(req.generation_tokens)
        self.ar_gen.labels(m, "ar").inc(req.generation_tokens)
        self.ar_ttft.labels(m, "ar").observe(req.ttft_s)
        self.ar_e2e.labels(m, "ar").observe(req.e2e_s)
        for stage in self.stages:
            self.success.labels(m, stage).inc()
        self.h_e2e.labels(m, "diffusion").observe(req.e2e_s + exec_s)
        self.h_exec.labels(m, "diffusion").observe(exec_s)
        self.h_step.labels(m, "diffusion").observe(exec_s / steps)
        self.h_pre.labels(m, "diffusion").observe(req.prefill_s * 0.2)
        self.h_post.labels(m, "diffusion").observe(exec_s * 0.1)
        self.h_ttfp.labels(m, "ar").observe(req.ttft_s * 1.3)

    def close(self) -> None:
        self.endpoint.close()


ENGINES = {"vllm": VllmStandIn, "sglang": SglangStandIn, "vllm-omni": VllmOmniStandIn}
