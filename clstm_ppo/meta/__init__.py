"""Few-shot BUY/HOLD/SELL on new underlyings (docs/ADAPTATION.md): tasks, MAML, prototypical
networks, baselines."""

from clstm_ppo.meta.tasks import CLASSES, Episodes, FewShotData, band, labels, sample_episodes

__all__ = ["CLASSES", "Episodes", "FewShotData", "band", "labels", "sample_episodes"]
