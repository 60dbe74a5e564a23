"""Rules that tie settings to each other; a single setting's own limits live beside
it (``setting``)."""

from __future__ import annotations

import os
from typing import Any

from clstm_ppo.config.fields import ConfigError, walk_rules


def check_values(cfg: Any) -> None:
    """The settings of ``cfg`` (a ``Config``) consistent with each other, or a one-line error.

    Each value was checked against its own rule when it was set; this runs when a whole
    config is built and again where a run starts (a config changed in code after it was
    built is checked there).
    """
    d, m, p, t = cfg.data, cfg.market, cfg.ppo, cfg.train
    for key, _, rule in walk_rules(type(cfg)):
        rule.check(key, _get(cfg, key))  # a list changed in place escaped its assignment check
    why = run_name_problem(cfg.output.run_name)
    if why:
        # a name that walks out of output.checkpoint_dir, or names it, would let
        # --fresh-start move it
        raise ConfigError(
            f"config: output.run_name {cfg.output.run_name!r} {why}: a run name is one folder name "
            "inside output.checkpoint_dir (e.g. --run-name mine); put the folder itself in "
            "--checkpoint-dir"
        )
    pairs = [
        (
            not m.moneyness or not m.expiries_days,
            "market.moneyness and market.expiries_days need at least one entry",
        ),
        (
            len(m.index_margin) != 2 or len(m.stock_margin) != 2,
            (
                "market.index_margin and market.stock_margin need two rates each: "
                "[a, b], e.g. [0.15, 0.10]"
            ),
        ),
        (
            len(m.costs.index_ticks) != 2 or len(m.costs.stock_ticks) != 2,
            "market.costs.index_ticks and market.costs.stock_ticks need two increments each: "
            "[below tick_break, at and above it], e.g. [0.05, 0.10]",
        ),
        (
            len(set(m.stock_targets)) != len(m.stock_targets),
            f"market.stock_targets repeat a value: {m.stock_targets}",
        ),
        (
            len(m.iv_model_coefs) != 3,
            f"market.iv_model_coefs needs three entries (a, b, c), got {m.iv_model_coefs}",
        ),
        (
            m.min_iv >= m.max_iv,
            f"market.min_iv ({m.min_iv}) must be below market.max_iv ({m.max_iv})",
        ),
        (
            m.sizing == "whole" and m.costs.max_volume_share * m.costs.min_option_volume < 1,
            f"market.costs.max_volume_share x min_option_volume ({m.costs.max_volume_share} x "
            f"{m.costs.min_option_volume}) must be at least 1 contract under market.sizing whole, "
            "or no order on a thin strike could fill",
        ),
        (
            m.costs.spread_min > m.costs.spread_max,
            (
                f"market.costs.spread_min ({m.costs.spread_min}) must not exceed spread_max "
                f"({m.costs.spread_max})"
            ),
        ),
        (
            d.train_frac + d.val_frac >= 1,
            (
                f"data.train_frac + data.val_frac ({d.train_frac} + {d.val_frac}) must leave a "
                "test split (sum below 1)"
            ),
        ),
        (
            d.augment > 0 and d.augment_source == "generator" and not d.augment_checkpoint,
            f"data.augment ({d.augment}) needs data.augment_checkpoint, a scenario generator's .pt "
            "(or another data.augment_source: bootstrap, fhs, underlyings)",
        ),
        (
            d.augment > 0 and d.augment_source == "underlyings" and not d.augment_underlyings,
            (
                f"data.augment ({d.augment}) from underlyings needs data.augment_underlyings, a "
                "data source such as dow"
            ),
        ),
        (
            cfg.prior.kl > 0 and not (cfg.pretrain.enabled and cfg.pretrain.method == "rule"),
            f"prior.kl ({cfg.prior.kl}) keeps the policy near the rule it was cloned from: set "
            "pretrain.enabled true and pretrain.method rule (or prior.kl 0)",
        ),
        (
            cfg.agent.actions == "scale" and 1.0 not in cfg.agent.scale_multiples,
            f"agent.scale_multiples {cfg.agent.scale_multiples} must hold 1 (the rule as it is, "
            "the only choice where the rule places nothing), e.g. [0, 0.5, 1, 1.5]",
        ),
        (
            len(set(cfg.agent.scale_multiples)) != len(cfg.agent.scale_multiples),
            f"agent.scale_multiples repeat a value: {cfg.agent.scale_multiples}",
        ),
        (
            p.credit == "position" and cfg.env.reward == "dsr",
            "ppo.credit position splits a bar's change in equity among the positions that made it; "
            "env.reward dsr is no sum of such parts: use env.reward equity or "
            "excess (or ppo.credit bar)",
        ),
        (
            p.risk_aversion > 0 and cfg.env.reward == "dsr",
            f"ppo.risk_aversion ({p.risk_aversion}) charges a bar's squared return; env.reward dsr "
            "already pays per unit of risk: use env.reward equity or excess (or risk_aversion 0)",
        ),
        (
            len(p.adam_betas) != 2,
            f"ppo.adam_betas needs two entries (beta1, beta2), got {p.adam_betas}",
        ),
        (
            t.num_envs % p.num_minibatches != 0,
            f"train.num_envs ({t.num_envs}) must be a multiple of ppo.num_minibatches "
            f"({p.num_minibatches}): minibatches are whole env sequences",
        ),
        (
            p.num_minibatches % p.grad_accumulation != 0,
            (
                f"ppo.grad_accumulation ({p.grad_accumulation}) must divide ppo.num_minibatches "
                f"({p.num_minibatches})"
            ),
        ),
        (
            t.total_steps < 1 and t.num_episodes < 1,
            "train.total_steps must be at least 1 (or set train.num_episodes)",
        ),
        (
            cfg.launch.cuda_graphs == "on" and cfg.launch.compile_loop == "off",
            "launch.cuda_graphs: on replays the compiled rollout decision; set launch.compile_loop "
            "to auto or on (or cuda_graphs off)",
        ),
        (
            cfg.launch.update_graphs
            and (cfg.launch.cuda_graphs == "off" or cfg.launch.compile_loop == "off"),
            "launch.update_graphs replays the compiled update beside the captured rollout; it "
            "needs launch.cuda_graphs auto or on and launch.compile_loop auto or on (or "
            "update_graphs false)",
        ),
        (
            cfg.launch.update_graphs and p.grad_accumulation > 1,
            f"launch.update_graphs needs ppo.grad_accumulation 1 (got {p.grad_accumulation}): each "
            "replay overwrites the gradients the last one made; set "
            "update_graphs false to accumulate",
        ),
        (
            cfg.launch.update_graphs and cfg.launch.precision == "fp16",
            "launch.update_graphs runs with the captured optimizer step, which fp16's loss scaler "
            "rules out: use launch.precision fp32 or bf16 (or update_graphs false)",
        ),
    ]
    for broken, message in pairs:
        if broken:
            raise ConfigError(f"config: {message}")


def _get(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a run folder's name (one path component: no separator, not . or
    .., no control character), or None when it can. The empty name means "derived from the
    data and the config"."""
    if name == "":
        return None
    if any(sep in name for sep in {"/", "\\", os.sep, os.altsep or "/"}):
        return "holds a path separator"
    if not name.strip():
        return "is blank"
    if name.strip() in (".", ".."):
        return "names a folder, not a run"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character"
    return None
