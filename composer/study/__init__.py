"""The study: every model and ablation on one dataset, each run an ordinary ``train()`` run evaluated alike.

* ``config``: study profiles and runs (data, not code: ``study.toml``).
* ``runner``: the study from its data to its report (:mod:`composer.report`: tables and plots).
* ``execute``: one run (scored by :mod:`composer.evaluation.suite`), and the map over runs (here or on Ray);
  ``search``, ``asha``: the recipe search (on Ray Tune under ASHA at a plateau budget).
* ``data``: the study's evaluation data.
"""

__all__ = ["config", "data", "execute", "runner", "search"]
