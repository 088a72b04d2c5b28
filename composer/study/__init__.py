"""The study: every model and ablation on one dataset, each run an ordinary ``train()`` run evaluated alike.

* ``config``: study profiles and runs (data, not code).
* ``runner``: the study from its data to its report (:mod:`composer.report`: tables and plots).
* ``execute``: one run, and the map over runs (here or on Ray); ``search``: the recipe search (on Ray Tune
  under ASHA at a plateau budget).
* ``data`` / ``evaluation``: the study's evaluation data and its evaluations.
"""

__all__ = ["config", "data", "evaluation", "execute", "runner", "search"]
