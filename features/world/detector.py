"""Region features that behave like an object detector's, for the generated world.

A fixed, seeded network maps an object's attributes to a ``D``-dimensional feature, as a detector's
pooled region feature encodes what is in the box. What makes it detector-like, and learnable only
through the data:

* **nonlinear and entangled**: attribute embeddings go through a random two-layer tanh network, so
  no feature dimension reads off "red" directly;
* **similar values look similar**: colour embeddings follow the colours' RGB values and sizes are
  ordered, so red is near orange and pink, cyan near blue;
* **confusions**: with probability ``confusion`` per region, one attribute is encoded as its most
  similar value (red seen as orange, metal as glass);
* **noise**: Gaussian noise whose norm is about ``noise`` times the (unit) norm of the code;
* **extra regions**: *part* regions (a sub-box of an object, encoding its colour and material but a
  blurred shape) and *background* regions (a background code and noise), as detectors propose many
  boxes that are not whole objects.

Box geometry is the true layout (:mod:`features.world.layout`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from features.world.layout import object_boxes
from features.world.scene import Scene, WorldConfig

__all__ = ["SyntheticDetector", "DetectorOutput", "COLOR_RGB"]

COLOR_RGB = {
    "red": (200, 30, 30), "orange": (240, 140, 20), "yellow": (235, 215, 40), "green": (40, 160, 60),
    "cyan": (40, 200, 210), "blue": (40, 70, 210), "purple": (130, 50, 170), "pink": (240, 130, 180),
    "brown": (120, 75, 35), "gray": (128, 128, 128), "black": (25, 25, 25), "white": (240, 240, 240),
}
_EMBED = 32   # per-attribute embedding size
_HIDDEN = 256
_KINDS = ("shape", "color", "size", "material")
# per-attribute weights of a whole object's region and of a part's (colour and material, little of the
# shape and size), by region kind
_KEEP = np.asarray([(1.0, 1.0, 1.0, 1.0), (0.3, 1.0, 0.5, 1.0)], np.float32)


@dataclass
class DetectorOutput:
    """The regions of ``B`` images, one image after another.

    Attributes:
        features: ``(sum R_i, D)`` float32.
        boxes: ``(sum R_i, 4)`` float32 pixel boxes x1, y1, x2, y2.
        counts: ``(B,)`` regions ``R_i`` of each image.
        object_index: ``(sum R_i,)`` the object each region shows, -1 for background.
        kind: ``(sum R_i,)`` 0 object, 1 part, 2 background.
    """

    features: np.ndarray
    boxes: np.ndarray
    counts: np.ndarray
    object_index: np.ndarray
    kind: np.ndarray


@dataclass
class _Plan:
    """One image's discrete choices: its ``R_obj`` object and part regions, then ``n_bg`` background ones."""

    attrs: list[list[int]]                 # R_obj rows of value indices (shape, color, size, material)
    boxes: list[list[float]]               # R_obj + n_bg pixel boxes
    owner: list[int]                       # R_obj + n_bg
    kind: list[int]                        # R_obj + n_bg: 0 object, 1 part (the first R_obj), 2 background
    n_bg: int


class SyntheticDetector:
    """Encode scenes into region features; the same ``seed`` always gives the same network."""

    def __init__(self, cfg: WorldConfig, seed: int = 0):
        self.cfg = cfg
        rng = np.random.default_rng([seed, 7919])
        self.tables = {
            "shape": self._random_table(rng, len(cfg.shapes)),
            "color": self._color_table(rng, cfg.colors),
            "size": self._ordinal_table(rng, len(cfg.sizes)),
            "material": self._random_table(rng, len(cfg.materials)),
        }
        self.values = {"shape": cfg.shapes, "color": cfg.colors, "size": cfg.sizes, "material": cfg.materials}
        self.index = {k: {v: i for i, v in enumerate(vals)} for k, vals in self.values.items()}
        self.background = rng.normal(size=4 * _EMBED).astype(np.float32)
        self.w1 = (rng.normal(size=(4 * _EMBED, _HIDDEN)) / np.sqrt(4 * _EMBED)).astype(np.float32)
        self.b1 = (0.1 * rng.normal(size=_HIDDEN)).astype(np.float32)
        self.w2 = (rng.normal(size=(_HIDDEN, cfg.feature_dim)) / np.sqrt(_HIDDEN)).astype(np.float32)
        # the value each attribute value is mistaken for
        self.similar = {k: self._nearest(t) for k, t in self.tables.items()}
        # Codes are unit vectors (entries ~ 1/sqrt(D)); pooled CNN features have entries of order 1,
        # and models (ViLBERT's LayerNorm(W_f f + W_g g)) expect features to outweigh the 5-d geometry.
        self.scale = float(np.sqrt(cfg.feature_dim))

    @staticmethod
    def _random_table(rng, n: int) -> np.ndarray:
        return rng.normal(size=(n, _EMBED)).astype(np.float32)

    @staticmethod
    def _color_table(rng, colors) -> np.ndarray:
        rgb = np.asarray([COLOR_RGB.get(c, tuple(rng.integers(0, 256, 3))) for c in colors], dtype=np.float32)
        proj = rng.normal(size=(3, _EMBED)).astype(np.float32)
        table = (rgb / 255.0 - 0.5) @ proj * 2.0
        return table + 0.3 * rng.normal(size=table.shape).astype(np.float32)

    @staticmethod
    def _ordinal_table(rng, n: int) -> np.ndarray:
        direction = rng.normal(size=_EMBED).astype(np.float32)
        steps = np.linspace(-1.5, 1.5, n, dtype=np.float32)[:, None]
        return steps * direction + 0.3 * rng.normal(size=(n, _EMBED)).astype(np.float32)

    @staticmethod
    def _nearest(table: np.ndarray) -> np.ndarray:
        d = ((table[:, None, :] - table[None, :, :]) ** 2).sum(-1)
        np.fill_diagonal(d, np.inf)
        return d.argmin(1)

    def _codes(self, attrs: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """``attrs (R, 4)`` value indices (shape, color, size, material), ``keep (R, 4)`` weights -> (R, D)."""
        parts = [self.tables[k][attrs[:, j]] * keep[:, j:j + 1] for j, k in enumerate(_KINDS)]
        x = np.concatenate(parts, axis=1)                       # (R, 4E)
        h = np.tanh(x @ self.w1 + self.b1)                      # (R, H)
        out = h @ self.w2                                       # (R, D)
        return out / (np.linalg.norm(out, axis=1, keepdims=True) + 1e-6)

    def encode_many(self, rngs: list[random.Random], scenes: list[Scene],
                    noise_rng: np.random.Generator) -> DetectorOutput:
        """Regions of many images, with the network run once over all their regions.

        ``rngs[i]`` makes image ``i``'s discrete choices (parts, confusions, background boxes);
        ``noise_rng`` draws all Gaussian noise of the call in one go, so a call's result depends on
        which images it holds: the generator calls this on fixed chunks of images.
        """
        plans = [self._plan(rng, scene) for rng, scene in zip(rngs, scenes)]
        # (sum R_obj, 5): the value indices (shape, color, size, material) and kind of every object/part region
        rows = np.asarray([a + [k] for p in plans for a, k in zip(p.attrs, p.kind)], np.int64)
        # A code depends only on its row: run the network once per distinct row (a 500-image chunk has
        # about 3,200 rows, 1,450 distinct).
        distinct, which = np.unique(rows, axis=0, return_inverse=True)
        codes = self._codes(distinct[:, :4], _KEEP[distinct[:, 4]])[which.reshape(-1)]  # (sum R_obj, D)
        n_obj = np.fromiter((len(p.attrs) for p in plans), np.int64, len(plans))  # (B,)
        n_bg = np.fromiter((p.n_bg for p in plans), np.int64, len(plans))         # (B,)
        bg = self.background[None, :] + 0.8 * noise_rng.standard_normal((int(n_bg.sum()), 4 * _EMBED),
                                                                        dtype=np.float32)
        h = np.tanh(bg @ self.w1 + self.b1) @ self.w2                             # (sum R_bg, D)
        bg_codes = h / (np.linalg.norm(h, axis=1, keepdims=True) + 1e-6)
        # each image's object rows, then its background rows
        counts = n_obj + n_bg                                                     # (B,)
        starts = np.cumsum(counts) - counts                                       # (B,) first row of image i
        obj_rows = np.arange(len(codes)) + np.repeat(starts - (np.cumsum(n_obj) - n_obj), n_obj)
        bg_rows = np.arange(len(bg_codes)) + np.repeat(starts + n_obj - (np.cumsum(n_bg) - n_bg), n_bg)
        feats = np.empty((int(counts.sum()), self.cfg.feature_dim), np.float32)   # (sum R_i, D)
        feats[obj_rows] = codes
        feats[bg_rows] = bg_codes
        # noise of norm ~cfg.noise against unit-norm codes
        noise = noise_rng.standard_normal(feats.shape, dtype=np.float32)
        noise *= self.cfg.noise / np.sqrt(self.cfg.feature_dim)
        feats += noise
        feats *= self.scale  # detector-like magnitudes: unit variance per dimension
        return DetectorOutput(feats, np.asarray([b for p in plans for b in p.boxes], np.float32), counts,
                              np.asarray([k for p in plans for k in p.owner], np.int64),
                              np.asarray([k for p in plans for k in p.kind], np.int64))

    def _plan(self, rng: random.Random, scene: Scene) -> _Plan:
        """The discrete random choices of one image: extra regions, confusions, background boxes."""
        cfg = self.cfg
        width, height = cfg.image_size
        n = len(scene.objects)
        obj_boxes = object_boxes(scene, width, height)                # (n, 4)
        attrs = [[self.index[k][getattr(o, k)] for k in _KINDS] for o in scene.objects]
        rows = [list(a) for a in attrs]
        boxes, owner, kind = obj_boxes.tolist(), list(range(n)), [0] * n
        for _ in range(rng.randint(*cfg.part_regions)):
            k = rng.randrange(n)
            x1, y1, x2, y2 = boxes[k]
            ym = (y1 + y2) / 2
            boxes.append([x1, y1, x2, ym] if rng.random() < 0.5 else [x1, ym, x2, y2])
            rows.append(list(attrs[k]))
            owner.append(k)
            kind.append(1)
        for row in rows:  # detector confusions: one attribute read as its most similar value
            if rng.random() < cfg.confusion:
                j = rng.randrange(4)
                row[j] = int(self.similar[_KINDS[j]][row[j]])
        n_bg = rng.randint(*cfg.background_regions)
        for _ in range(n_bg):
            x1, y1 = rng.uniform(0, width * 0.6), rng.uniform(0, height * 0.6)
            boxes.append([x1, y1, min(width, x1 + rng.uniform(40, width * 0.5)),
                          min(height, y1 + rng.uniform(30, height * 0.5))])
            owner.append(-1)
            kind.append(2)
        return _Plan(rows, boxes, owner, kind, n_bg)
