"""Box geometry: pixel boxes -> the 5-d position feature of ViLBERT (Appendix C of the paper).

For a box ``(x1, y1, x2, y2)`` in pixels of a ``w x h`` image the position feature is

    [x1 / w, y1 / h, x2 / w, y2 / h, (x2 - x1) * (y2 - y1) / (w * h)]

exactly as ViLBERT's ``ImageFeaturesH5Reader`` computes it (corners normalised by the image size,
then the box's area as a fraction of the image's). The mean-pooled "global" region that ViLBERT
prepends gets the whole-image position ``[0, 0, 1, 1, 1]``.

Pure numpy, no torch; every function has a doctest.
"""

from __future__ import annotations

import numpy as np

__all__ = ["box_geometry", "GLOBAL_GEOMETRY", "grid_boxes"]

# The position of ViLBERT's mean-pooled global region: the whole image.
GLOBAL_GEOMETRY = np.array([0.0, 0.0, 1.0, 1.0, 1.0], dtype=np.float32)


def box_geometry(boxes: np.ndarray, width: float, height: float) -> np.ndarray:
    """The 5-d position feature of each box.

    Args:
        boxes: ``(N, 4)`` pixel boxes ``x1, y1, x2, y2`` (any float or int dtype).
        width, height: the image size in pixels, both > 0.

    Returns:
        ``(N, 5)`` float32 ``[x1/w, y1/h, x2/w, y2/h, area/(w*h)]``.

    >>> box_geometry(np.array([[0, 0, 50, 25], [10, 20, 60, 120]]), width=100, height=200)
    array([[0.    , 0.    , 0.5   , 0.125 , 0.0625],
           [0.1   , 0.1   , 0.6   , 0.6   , 0.25  ]], dtype=float32)
    >>> box_geometry(np.zeros((0, 4)), 640, 480).shape
    (0, 5)
    >>> box_geometry(np.zeros((1, 4)), 0, 480)
    Traceback (most recent call last):
    ValueError: image size must be positive to normalise boxes, got width=0 height=480
    """
    boxes = np.asarray(boxes, dtype=np.float32)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must have shape (N, 4) as x1, y1, x2, y2, got {boxes.shape}")
    if not (width > 0 and height > 0):
        raise ValueError(f"image size must be positive to normalise boxes, got width={width} height={height}")
    w, h = float(width), float(height)
    geo = np.empty((boxes.shape[0], 5), dtype=np.float32)  # (N, 5)
    geo[:, 0] = boxes[:, 0] / w
    geo[:, 1] = boxes[:, 1] / h
    geo[:, 2] = boxes[:, 2] / w
    geo[:, 3] = boxes[:, 3] / h
    geo[:, 4] = (boxes[:, 3] - boxes[:, 1]) * (boxes[:, 2] - boxes[:, 0]) / (w * h)
    return geo


def grid_boxes(grid_h: int, grid_w: int, width: float, height: float) -> np.ndarray:
    """Pixel boxes of the cells of a ``grid_h x grid_w`` feature map laid over a ``width x height`` image.

    Cells are listed row by row (the order of a flattened ``(H, W)`` feature map).

    >>> grid_boxes(2, 3, width=300, height=100)
    array([[  0.,   0., 100.,  50.],
           [100.,   0., 200.,  50.],
           [200.,   0., 300.,  50.],
           [  0.,  50., 100., 100.],
           [100.,  50., 200., 100.],
           [200.,  50., 300., 100.]], dtype=float32)
    """
    xs = np.linspace(0.0, float(width), grid_w + 1, dtype=np.float64)
    ys = np.linspace(0.0, float(height), grid_h + 1, dtype=np.float64)
    x1, y1 = np.meshgrid(xs[:-1], ys[:-1])  # (gh, gw) each
    x2, y2 = np.meshgrid(xs[1:], ys[1:])
    return np.stack([x1, y1, x2, y2], axis=-1).reshape(grid_h * grid_w, 4).astype(np.float32)  # (gh*gw, 4)
