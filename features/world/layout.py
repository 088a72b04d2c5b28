"""Where each object lands in the picture: a simple perspective layout, shared by the rendered PNGs
and the region boxes in the feature store (so the two always agree).

Depth ``z`` moves an object up the image and shrinks it; a stacked object sits on its support's top.
"""

from __future__ import annotations

import numpy as np

from features.world.scene import Scene

__all__ = ["object_boxes", "SIZE_PIXELS"]

SIZE_PIXELS = {"small": 24.0, "medium": 36.0, "large": 50.0}
_ASPECT = {"ball": 1.0, "cube": 1.0, "cylinder": 1.25, "cone": 1.3, "pyramid": 1.0, "ring": 0.55}


def _scale(z: float) -> float:
    return 1.0 - 0.45 * z


def object_boxes(scene: Scene, width: int, height: int) -> np.ndarray:
    """Pixel boxes ``(N, 4)`` as x1, y1, x2, y2 (float32), one per object, inside the image."""
    n = len(scene.objects)
    boxes = np.zeros((n, 4), dtype=np.float32)
    done = [False] * n

    def place(k: int) -> None:
        obj = scene.objects[k]
        s = _scale(obj.z) * SIZE_PIXELS.get(obj.size, 36.0) * width / 320.0
        w, h = s, s * _ASPECT.get(obj.shape, 1.0)
        cx = width * (0.08 + 0.84 * obj.x)
        if obj.support >= 0:
            if not done[obj.support]:
                place(obj.support)
            bottom = boxes[obj.support, 1]
        else:
            bottom = height * (0.93 - 0.5 * obj.z)
        boxes[k] = (cx - w / 2, bottom - h, cx + w / 2, bottom)
        done[k] = True

    for k in range(n):
        if not done[k]:
            place(k)
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, width)
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, height)
    return boxes
