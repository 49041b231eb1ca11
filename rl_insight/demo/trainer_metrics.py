"""verl's trainer metric keys (as verl's trainer logs them) with plausible, evolving values.

The key list follows upstream's verl dashboard (upstream-monitor.md §8.2). Values follow a GRPO-like
run on GSM8K: reward and accuracy rise and saturate, entropy and KL drift, response length grows,
and the training/rollout probability gap stays in verl's normal range (< 0.005).
"""

from __future__ import annotations

import math
import random

from .token_batch import batch_metrics

FAMILY_STATS = ("max", "mean", "min")

# key -> (value at start, value after many steps, relative noise)
_TRAJECTORIES: dict[str, tuple[float, float, float]] = {
    "actor/entropy": (1.10, 0.45, 0.03),
    "actor/entropy_loss": (1.10, 0.45, 0.03),
    "actor/grad_norm": (0.60, 0.25, 0.15),
    "actor/kl_coef": (0.001, 0.001, 0.0),
    "actor/kl_loss": (0.0005, 0.012, 0.10),
    "actor/loss": (0.02, -0.01, 0.30),
    "actor/lr": (1e-6, 1e-6, 0.0),
    "actor/perf/cpu_memory_used_gb": (48.0, 52.0, 0.02),
    "actor/perf/max_memory_allocated_gb": (52.0, 58.0, 0.01),
    "actor/perf/max_memory_reserved_gb": (61.0, 66.0, 0.01),
    "actor/pg_clipfrac": (0.002, 0.006, 0.20),
    "actor/pg_clipfrac_lower": (0.0, 0.0004, 0.30),
    "actor/pg_loss": (0.015, -0.008, 0.40),
    "actor/ppo_kl": (0.0001, 0.0006, 0.30),
    "perf/mfu/actor": (0.32, 0.36, 0.03),
    "rollout_corr/chi2_seq": (0.004, 0.003, 0.2),
    "rollout_corr/chi2_token": (0.0009, 0.0007, 0.2),
    "rollout_corr/k3_kl": (0.0004, 0.0003, 0.2),
    "rollout_corr/kl": (0.0005, 0.0004, 0.2),
    "rollout_corr/log_ppl_abs_diff": (0.003, 0.0025, 0.2),
    "rollout_corr/log_ppl_diff": (0.0004, 0.0002, 0.4),
    "rollout_corr/log_ppl_diff_max": (0.02, 0.015, 0.2),
    "rollout_corr/log_ppl_diff_min": (-0.02, -0.015, 0.2),
    "rollout_corr/ppl_ratio": (1.0004, 1.0002, 0.0002),
    "rollout_corr/rollout_log_ppl": (0.35, 0.22, 0.05),
    "rollout_corr/rollout_ppl": (1.42, 1.25, 0.02),
    "rollout_corr/training_log_ppl": (0.35, 0.22, 0.05),
    "rollout_corr/training_ppl": (1.42, 1.25, 0.02),
    "training/num_turns/mean": (1.0, 1.0, 0.0),
    "training/rollout_actor_probs_pearson_corr": (0.996, 0.997, 0.001),
    "training/rollout_probs_diff_mean": (0.0021, 0.0017, 0.10),
    "training/rollout_probs_diff_max": (0.42, 0.35, 0.15),
    "training/rollout_probs_diff_std": (0.011, 0.009, 0.10),
    "training/rollout_probs_diff_valid": (1.0, 1.0, 0.0),
}


def _approach(start: float, end: float, step: int, tau: float = 25.0) -> float:
    return end + (start - end) * math.exp(-step / tau)


class TrainerMetricModel:
    """Produces one step's metrics dict (verl keys, "/" separated) from measured phase timings."""

    def __init__(self, seed: int = 0, batch_size: int = 256, steps_per_epoch: int = 29,
                 filter_share: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.filter_share = filter_share
        self.batch_size = batch_size
        self.steps_per_epoch = steps_per_epoch

    def _noisy(self, value: float, rel: float) -> float:
        return value * (1 + self.rng.gauss(0, rel)) if rel else value

    def _stats(self, out: dict[str, float], prefix: str, mean: float, spread: float, lo: float | None = None) -> None:
        out[f"{prefix}/mean"] = mean
        out[f"{prefix}/max"] = mean + spread
        out[f"{prefix}/min"] = mean - spread if lo is None else max(lo, mean - spread)

    def step_metrics(self, step: int, timings: dict[str, float], staleness: float) -> dict[str, float]:
        rng = self.rng
        out: dict[str, float] = {k: self._noisy(_approach(a, b, step), n) for k, (a, b, n) in _TRAJECTORIES.items()}
        out["training/global_step"] = step
        out["training/epoch"] = (step - 1) // self.steps_per_epoch
        reward = max(0.0, min(1.0, _approach(0.18, 0.86, step, 20) + rng.gauss(0, 0.02)))
        self._stats(out, "critic/score", reward, 1 - reward, lo=0.0)
        out["critic/score/max"] = 1.0
        out["critic/score/min"] = 0.0
        self._stats(out, "critic/rewards", reward, 1 - reward, lo=0.0)
        out["critic/rewards/max"], out["critic/rewards/min"] = 1.0, 0.0
        self._stats(out, "critic/advantages", 0.0, 1.8 + rng.gauss(0, 0.05))
        self._stats(out, "critic/returns", 0.0, 1.8 + rng.gauss(0, 0.05))
        # the generated batch, sample by sample (token_batch.py): verl's length and token metrics hold exactly
        out.update(batch_metrics(rng, _approach(190, 340, step, 30), filter_share=self.filter_share))
        resp, prompt = out["response_length/mean"], out["prompt_length/mean"]
        for k in ("mean", "max", "min", "clip_ratio"):
            out[f"response_length_non_aborted/{k}"] = out[f"response_length/{k}"]
        out["response/aborted_ratio"] = 0.0
        seq = (prompt + resp) * self.batch_size * 5 / 8
        for k, v in (("mean", seq), ("max", seq * 1.04), ("min", seq * 0.96), ("balanced_max", seq * 1.003),
                     ("balanced_min", seq * 0.997)):
            out[f"global_seqlen/{k}"] = v
        out["global_seqlen/minmax_diff"] = seq * 0.08
        out["training/num_turns/max"] = out["training/num_turns/min"] = 1.0
        self._stats(out, "training/off_policy_trajectory_spans", 1.0 + staleness, staleness, lo=1.0)
        out["training/off_policy_trajectory_staleness/mean"] = staleness
        out["training/off_policy_trajectory_staleness/max"] = staleness
        self._stats(out, "training/off_policy_trajectory_staleness_worst", staleness, 0.0, lo=0.0)

        # timings: measured phases of this demo step, scaled to a realistic magnitude (demo seconds -> s)
        for phase in ("gen", "old_log_prob", "ref", "update_actor", "update_weights", "adv", "testing"):
            out[f"timing_s/{phase}"] = timings.get(phase, 0.0)
        out["timing_s/step"] = timings.get("step", sum(timings.values()))
        tokens = out["perf/total_num_tokens"]
        for phase, key in (("gen", "gen"), ("ref", "ref"), ("update_actor", "update_actor"), ("adv", "adv")):
            out[f"timing_per_token_ms/{key}"] = 1000 * out[f"timing_s/{phase}"] / tokens
        out["perf/time_per_step"] = out["timing_s/step"]
        out["perf/throughput"] = tokens / max(out["timing_s/step"], 1e-6) / 8
        acc = max(0.0, min(1.0, _approach(0.22, 0.88, step, 20) + rng.gauss(0, 0.01)))
        out["val-core/openai/gsm8k/acc/mean@1"] = acc
        out["val-aux/openai/gsm8k/reward/mean@1"] = acc
        for k in FAMILY_STATS:
            out[f"val-aux/num_turns/{k}"] = 1.0
        return out


def faulty_metrics(fault: str, since: int, metrics: dict[str, float]) -> dict[str, float]:
    """`--fault nan`: the policy loss diverges to NaN (the client drops it and counts it: RLInsightNonFiniteMetric).
    `--fault precision-drift`: the training/rollout probability gap leaves verl's normal range and keeps climbing
    (RLInsightPrecisionMismatch), dragging actor/grad_norm up with it, as verl's FAQ describes. `since`: steps since
    the fault began."""
    if fault == "nan":
        return {"actor/pg_loss": float("nan"), "actor/loss": float("nan")}
    gap = 0.012 + 0.002 * since
    return {"training/rollout_probs_diff_mean": gap, "training/rollout_probs_diff_max": min(1.0, 40 * gap),
            "training/rollout_probs_diff_std": 5 * gap,
            "actor/grad_norm": metrics.get("actor/grad_norm", 0.3) * (1 + 0.15 * since)}


def verl_keys() -> list[str]:
    """Every key `step_metrics` produces, the MoE keys of `--moe` and slime's of `--framework slime` (used by tests
    and the metric catalog)."""
    from ..semantics.slime_panels import SLIME_KEYS

    return sorted([*TrainerMetricModel().step_metrics(1, {}, 0.0), *moe_metrics(1, random.Random(0)), *SLIME_KEYS])


# verl-omni's extra trainer keys (upstream's verl_omni dashboard plots them): rewards from audio/image
# judges, per-image timings, ratio statistics.
OMNI_KEYS = ("actor/pg_clipfrac_higher", "actor/ratio_mean", "actor/ratio_std", "critic/reward_clap/mean",
             "critic/reward_imagebind/mean", "critic/reward_combined/mean", "critic/rewards_zero_std_ratio",
             "perf/total_num_images", "timing_per_image_ms/gen", "timing_per_image_ms/update_actor",
             "rollout_corr/logprob_abs_diff/mean")


def omni_metrics(step: int, base: dict[str, float], rng: random.Random) -> dict[str, float]:
    """The omni keys for one step, consistent with the base metrics of that step."""
    reward = base.get("critic/score/mean", 0.5)
    images = 256 * 4
    gen_s = base.get("timing_s/gen", 1.0)
    upd_s = base.get("timing_s/update_actor", 1.0)
    return {
        "actor/pg_clipfrac_higher": 0.002 + abs(rng.gauss(0, 0.001)),
        "actor/ratio_mean": 1.0 + rng.gauss(0, 0.002),
        "actor/ratio_std": 0.03 + abs(rng.gauss(0, 0.005)),
        "critic/reward_clap/mean": reward * 0.9,
        "critic/reward_imagebind/mean": reward * 0.8,
        "critic/reward_combined/mean": reward * 0.85,
        "critic/rewards_zero_std_ratio": max(0.0, 0.3 - step * 0.005),
        "perf/total_num_images": float(images * step),
        "timing_per_image_ms/gen": 1000 * gen_s / images,
        "timing_per_image_ms/update_actor": 1000 * upd_s / images,
        "rollout_corr/logprob_abs_diff/mean": 0.004 + abs(rng.gauss(0, 0.001)),
    }


def moe_metrics(step: int, rng: random.Random, layers: int = 12, experts: int = 16) -> dict[str, float]:
    """`--moe`: one step's rollout/moe/* metrics as verl logs them (rl_insight/semantics/moe.py), from simulated routing
    counts: near-uniform load, except expert 5 of layer 7, which gets busier step by step (up to 4x its share),
    and a milder hot spot in layer 2."""
    from ..semantics.moe import load_balance_metrics

    counts = []
    for layer in range(layers):
        row = [max(0.0, rng.gauss(1000, 60)) for _ in range(experts)]
        if layer == 7:
            row[5] *= min(4.0, 1.5 + 0.08 * step)
        elif layer == 2:
            row[11] *= 1.6
        counts.append(row)
    return load_balance_metrics(counts)


def slime_metrics(verl: dict[str, float]) -> dict[str, float]:
    """`--framework slime`: the same simulated step under the keys slime logs (semantics/slime_panels.py SLIME_KEYS), as
    its logger reports them to rl_insight (with role / rank labels)."""
    return {
        "train/loss": verl["actor/pg_loss"],
        "train/grad_norm": verl["actor/grad_norm"],
        "train/lr-pg_0": verl["actor/lr"],
        "rollout/response_len/mean": verl["response_length/mean"],
        "rollout/rewards": verl["critic/rewards/mean"],
        "rollout/truncated_ratio": verl["response_length/clip_ratio"],
        "perf/rollout_time": verl["timing_s/gen"],
        "perf/train_time": verl["timing_s/update_actor"] + verl["timing_s/old_log_prob"] + verl["timing_s/ref"],
        "perf/update_weights_time": verl["timing_s/update_weights"],
    }

