"""A study's report, made from its runs' results alone (nothing here trains or imports the study):

* ``results``: every finished run's result under ``OUT/runs`` gathered into ``OUT/results.json``;
* ``render``: the tables and plots of a study folder from that file (rerun alone by ``gc-study --report-only``);
* ``tables``, ``generations``, ``convergence``: the papers' tables, IL-CLIP's generation recovery, how each
  run trained to its plateau; ``search``: the recipe search's table; ``plots``: the figures.
"""

__all__ = ["convergence", "generations", "plots", "render", "results", "search", "tables"]
