"""One demo step's generated batch, sample by sample, and what verl (plus a job's own token counts) logs of it.

A GRPO-like step draws groups of `n` responses until `groups` of them have reward variance; with `filter_share`
the rest are dropped before training (dynamic sampling, as in DAPO), exactly `filter_share` of the groups drawn.
Responses are cut at `max_len` tokens (those are truncated). The metrics are computed from the samples, so verl's
identities hold exactly (semantics/token_ledger.py reads them back): `perf/total_num_tokens` is the trained
batch's prompt plus response tokens, `prompt_length/mean` and `response_length/mean|max|clip_ratio` its
sequences'; `tokens/generated`, `tokens/filtered`, `tokens/stale`, `tokens/aborted` and `groups/drawn|filtered` are
the counts a job adds to its metrics dict to complete the token ledger.
"""

from __future__ import annotations

import random


def groups_drawn(groups: int, filter_share: float) -> int:
    """Groups to draw so that `groups` remain when `filter_share` of them are filtered: round(groups / (1 - share));
    the share filtered is then exactly (drawn - groups) / drawn (0.25 of 24 kept: 32 drawn, 8 filtered)."""
    return round(groups / (1.0 - min(max(filter_share, 0.0), 0.9)))


def batch_metrics(rng: random.Random, mean_response: float, groups: int = 24, n: int = 8,
                  filter_share: float = 0.0, max_len: int = 1024, prompt_mean: float = 105.0) -> dict[str, float]:
    """The token metrics of one step (see the module docstring)."""
    drawn = groups_drawn(groups, filter_share)
    trained_prompts: list[int] = []
    trained_responses: list[int] = []
    generated = filtered = 0
    for g in range(drawn):
        prompt = max(8, round(rng.gauss(prompt_mean, 20)))
        lengths = [min(max_len, max(1, round(rng.expovariate(1 / mean_response)))) for _ in range(n)]
        generated += sum(lengths)
        if g >= groups:  # a zero-variance group: every response got the same reward
            filtered += sum(lengths)
            continue
        trained_prompts += [prompt] * n
        trained_responses += lengths
    count = len(trained_responses)
    return {
        "perf/total_num_tokens": float(sum(trained_prompts) + sum(trained_responses)),
        "prompt_length/mean": sum(trained_prompts) / count,
        "prompt_length/max": float(max(trained_prompts)),
        "prompt_length/min": float(min(trained_prompts)),
        "prompt_length/clip_ratio": 0.0,
        "response_length/mean": sum(trained_responses) / count,
        "response_length/max": float(max(trained_responses)),
        "response_length/min": float(min(trained_responses)),
        "response_length/clip_ratio": sum(1 for r in trained_responses if r >= max_len) / count,
        "tokens/generated": float(generated),
        "tokens/filtered": float(filtered),
        "tokens/stale": 0.0,
        "tokens/aborted": 0.0,
        "groups/drawn": float(drawn),
        "groups/filtered": float(drawn - groups),
    }
