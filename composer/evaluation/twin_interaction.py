"""Does a model's preference between two twin captions depend on the image? (issue 36)

A Winoground group score of 0 can mean two different things: the model reads the difference between the
twin images the wrong way, or it does not read it at all. A scorer of the form ``score(c, i) = f(c) + g(i)``
(caption and image never interact) prefers the same caption on both images, whatever the images show, so
its text and group scores are 0 by construction. This module measures that directly.

For a group with scores ``s[c, i]`` (caption ``c`` on image ``i``; caption ``k`` is true of image ``k``), the
*preference* on image ``i`` is ``d(i) = s[0, i] - s[1, i]``. Over a set of groups:

* **image dependence**: ``sum |d(0) - d(1)| / sum (|d(0)| + |d(1)|)``, i.e. the mean ``|d(0) - d(1)|``
  against twice the mean ``|d|`` (the factor makes it a share: by the triangle inequality it lies in
  [0, 1]). 0: the image moves both captions' scores by the same amount (an additive scorer); 1: the
  preference has opposite signs on the two images in every group. None when every ``d`` is 0.
* each group falls in exactly one of four outcomes (percent of groups):

  - **tie**: ``d(i) == 0`` exactly on at least one image (no preference there);
  - **same caption**: one caption wins on both images (blind to the difference, or ignoring it);
  - **right way**: each image prefers its own caption (Winoground's text score);
  - **wrong way**: each image prefers the other's caption (reads the difference, backwards).

Pure numpy; scores are ``(G, 2, 2)`` arrays as :func:`composer.evaluation.twins.twin_scores` takes them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["OUTCOMES", "interaction_summary", "twin_interaction"]

OUTCOMES = ("tie", "same_caption", "right_way", "wrong_way")


def _preferences(scores) -> np.ndarray:
    """(G, 2) preferences ``d[g, i] = s[g, 0, i] - s[g, 1, i]`` from (G, 2 captions, 2 images) scores."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 3 or s.shape[1:] != (2, 2):
        raise ValueError(f"twin scores must be (groups, 2 captions, 2 images), got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("twin scores must be finite for the interaction diagnostic")
    return s[:, 0, :] - s[:, 1, :]                                                      # (G, 2)


def interaction_summary(scores) -> dict:
    """Image dependence and the four outcomes (percent) of ``(G, 2, 2)`` scores; ``groups`` = G.

    >>> f, g = np.array([0.3, -1.2]), np.array([2.0, 5.0])          # additive: f(caption) + g(image)
    >>> interaction_summary((f[:, None] + g[None, :])[None])
    {'image_dependence': 0.0, 'tie': 0.0, 'same_caption': 100.0, 'right_way': 0.0, 'wrong_way': 0.0, 'groups': 1}
    >>> interaction_summary(np.array([[[2.0, 1.0], [0.0, 3.0]], [[1.0, 3.0], [2.0, 1.0]]]))["image_dependence"]
    1.0
    """
    d = _preferences(scores)                                                           # (G, 2)
    n = d.shape[0]
    if n == 0:
        return {"image_dependence": None, **{k: None for k in OUTCOMES}, "groups": 0}
    total = float(np.abs(d).sum())
    dependence = float(np.abs(d[:, 0] - d[:, 1]).sum()) / total if total > 0 else None
    tie = (d == 0).any(axis=1)                                                         # (G,)
    same = ~tie & (np.sign(d[:, 0]) == np.sign(d[:, 1]))
    right = ~tie & (d[:, 0] > 0) & (d[:, 1] < 0)
    wrong = ~tie & (d[:, 0] < 0) & (d[:, 1] > 0)
    share = {k: round(100.0 * float(v.mean()), 2) for k, v in zip(OUTCOMES, (tie, same, right, wrong))}
    return {"image_dependence": None if dependence is None else round(dependence, 4), **share, "groups": n}


def twin_interaction(scores, kinds=None) -> dict:
    """:func:`interaction_summary` overall and per twin kind (``kinds``: (G,) labels, e.g. relation / binding).

    >>> s = np.array([[[1.0, 1.0], [0.0, 0.0]], [[2.0, 1.0], [0.0, 3.0]]])
    >>> out = twin_interaction(s, ["binding", "relation"])
    >>> out["same_caption"], out["binding"]["image_dependence"], out["relation"]["right_way"]
    (50.0, 0.0, 100.0)
    """
    out = interaction_summary(scores)
    if kinds is not None:
        kinds = np.asarray(kinds)
        s = np.asarray(scores, dtype=np.float64)
        if kinds.shape != (s.shape[0],):
            raise ValueError(f"kinds must be one label per group ({s.shape[0]}), got shape {kinds.shape}")
        out.update({str(k): interaction_summary(s[kinds == k]) for k in sorted(set(kinds.tolist()))})
    return out
