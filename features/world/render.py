"""Render a scene as an RGB picture (PIL), for looking at and for the raw-image extraction path.

Objects are drawn far to near (painter's algorithm) at the boxes of :mod:`features.world.layout`:
ball = disc, cube = square with a lit top, cylinder = body with elliptic caps, cone and pyramid =
triangles, ring = annulus. Materials change the look: metal gets a highlight, glass is translucent,
wood gets grain lines, rubber is matte, plastic has a soft sheen.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from features.world.detector import COLOR_RGB
from features.world.layout import object_boxes
from features.world.scene import Scene

__all__ = ["render_scene", "save_png"]


def _shade(rgb, factor: float):
    return tuple(int(max(0, min(255, c * factor))) for c in rgb)


def render_scene(scene: Scene, size: tuple[int, int] = (320, 240)):
    """The scene as a ``PIL.Image`` (RGB)."""
    from PIL import Image, ImageDraw

    width, height = size
    img = Image.new("RGB", size, (200, 205, 210))
    draw = ImageDraw.Draw(img, "RGBA")
    horizon = int(height * 0.42)
    draw.rectangle([0, horizon, width, height], fill=(168, 160, 150))
    boxes = object_boxes(scene, width, height)
    order = sorted(range(len(scene.objects)), key=lambda k: (-scene.objects[k].z, boxes[k, 3]))
    for k in order:
        obj = scene.objects[k]
        x1, y1, x2, y2 = (float(v) for v in boxes[k])
        base = COLOR_RGB.get(obj.color, (128, 128, 128))
        alpha = 150 if obj.material == "glass" else 255
        fill = base + (alpha,)
        dark = _shade(base, 0.6) + (alpha,)
        light = _shade(base, 1.3) + (alpha,)
        if obj.support < 0:  # shadow on the ground
            draw.ellipse([x1 + 2, y2 - 4, x2 + 4, y2 + 3], fill=(0, 0, 0, 60))
        if obj.shape == "ball":
            draw.ellipse([x1, y1, x2, y2], fill=fill, outline=dark)
        elif obj.shape == "cube":
            d = (x2 - x1) * 0.2
            draw.polygon([(x1, y1 + d), (x1 + d, y1), (x2, y1), (x2 - d, y1 + d)], fill=light)
            draw.rectangle([x1, y1 + d, x2 - d, y2], fill=fill, outline=dark)
            draw.polygon([(x2 - d, y1 + d), (x2, y1), (x2, y2 - d), (x2 - d, y2)], fill=dark)
        elif obj.shape == "cylinder":
            e = (y2 - y1) * 0.15
            draw.rectangle([x1, y1 + e / 2, x2, y2 - e / 2], fill=fill)
            draw.ellipse([x1, y2 - e, x2, y2], fill=fill, outline=dark)
            draw.ellipse([x1, y1, x2, y1 + e], fill=light, outline=dark)
        elif obj.shape == "cone":
            draw.polygon([((x1 + x2) / 2, y1), (x2, y2 - 3), (x1, y2 - 3)], fill=fill, outline=dark)
            draw.ellipse([x1, y2 - 6, x2, y2], fill=dark)
        elif obj.shape == "pyramid":
            mid = x1 + (x2 - x1) * 0.6
            draw.polygon([(mid, y1), (x2, y2), (x1, y2)], fill=fill, outline=dark)
            draw.polygon([(mid, y1), (x2, y2), (mid, y2)], fill=dark)
        else:  # ring
            draw.ellipse([x1, y1, x2, y2], outline=fill, width=max(3, int((x2 - x1) * 0.18)))
        if obj.material == "metal":
            cx, cy = x1 + (x2 - x1) * 0.35, y1 + (y2 - y1) * 0.3
            r = max(2.0, (x2 - x1) * 0.1)
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(255, 255, 255, 200))
        elif obj.material == "wooden":
            for t in np.linspace(0.25, 0.75, 3):
                y = y1 + (y2 - y1) * t
                draw.line([(x1 + 3, y), (x2 - 3, y)], fill=_shade(base, 0.75) + (160,), width=1)
        elif obj.material == "plastic":
            draw.line([(x1 + 3, y1 + 4), (x1 + (x2 - x1) * 0.5, y1 + 4)], fill=(255, 255, 255, 120), width=2)
    return img


def save_png(scene: Scene, path: str | Path, size: tuple[int, int] = (320, 240)) -> None:
    """Write the rendered scene as a PNG (deterministic bytes for the same scene)."""
    render_scene(scene, size).save(path, format="PNG", optimize=False)
