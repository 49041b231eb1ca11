"""slime's (THUDM/slime) trainer panels: the keys its logger reports through rl_insight (role / rank labels), as
upstream RL-Insight's "Slime Training with SGLang" dashboard reads them (tools/build_dashboards.py renders it; the
demo's `--framework slime` logs them). Stdlib only, like the rest of the catalogue (panels.py)."""

from __future__ import annotations

SLIME_KEYS: tuple[str, ...] = ("train/loss", "train/grad_norm", "train/lr-pg_0", "rollout/response_len/mean",
                               "rollout/rewards", "rollout/truncated_ratio", "perf/rollout_time", "perf/train_time",
                               "perf/update_weights_time")
# (title, [(exposed name, legend)], unit, description)
SLIME_PANELS: tuple[tuple[str, tuple[tuple[str, str], ...], str, str], ...] = (
    ("Training loss", (("train_loss", "loss · role={{role}} · rank={{rank}}"),), "none",
     "Slime training loss for the selected project and experiment."),
    ("Gradient norm", (("train_grad_norm", "grad norm · role={{role}} · rank={{rank}}"),), "none",
     "Slime optimizer gradient norm."),
    ("Learning rate", (("train_lr_pg_0", "learning rate · role={{role}} · rank={{rank}}"),), "none",
     "Slime optimizer learning rate of parameter group 0."),
    ("Response length", (("rollout_response_len_mean", "response length · role={{role}} · rank={{rank}}"),), "short",
     "Mean generated response length (tokens) reported by slime."),
    ("Reward", (("rollout_rewards", "reward · role={{role}} · rank={{rank}}"),), "none",
     "Rollout reward reported by slime."),
    ("Truncated ratio", (("rollout_truncated_ratio", "truncated ratio · role={{role}} · rank={{rank}}"),),
     "percentunit", "Fraction of rollout samples truncated at the length limit."),
    ("Slime phase duration", (("perf_rollout_time", "rollout · role={{role}} · rank={{rank}}"),
                              ("perf_train_time", "training · role={{role}} · rank={{rank}}"),
                              ("perf_update_weights_time", "weight update · role={{role}} · rank={{rank}}")), "s",
     "Rollout, training and weight-update durations of each step."),
)

