"""Evaluation of any trained model: what is scored and how it is reported. No Lightning.

* ``eval_sets``: an evaluation set (CRG, candidate images, regions) from any corpus and split.
* ``sentence_retrieval``: the one sentence-retrieval report every model's evaluation writes.
* ``truth``: the protocol through which a dataset's exact truth reaches evaluation.
* ``twins``: Winoground text / image / group scores of minimal-pair twin groups.
* ``twin_interaction``: how much a model's preference between twin captions depends on the image.
* ``benchmark``: the field's compositionality benchmarks scored with any model.
* ``phrase_retrieval``: phrase-to-image retrieval, single- and multi-positive.
* ``rerank``: shortlist-and-rerank with a first-stage model.
* ``hard_negatives``: I2T / T2I / group accuracy on hard negatives, recursive averages (Oh et al.).
* ``text_pairs``: free texts parsed as the CRG builder parses captions, scored against stored images.
* ``interpretation``: Figure 5's per-concept score trees.
* ``mcd_windows``: an MCD split and Figure 4's windows along compound divergence, as split files.
* ``suite``: the study's evaluations of one trained model on the generated world.
"""

__all__ = ["eval_sets", "sentence_retrieval", "truth", "twins", "twin_interaction", "benchmark", "phrase_retrieval", "rerank",
           "hard_negatives", "text_pairs", "interpretation", "mcd_windows", "suite"]
