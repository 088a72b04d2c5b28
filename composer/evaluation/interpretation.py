"""Interpreting COMPOSER's decision (Zhang et al. 2021, §5.3, Figure 5).

COMPOSER scores every concept of a caption on the image, not only the sentence, so its decision can be
read along the composition: which primitives it grounds, and where a wrong score enters and propagates
upwards. Figure 5 shows the composition tree of a caption with each concept's alignment score on the
ground-truth image and on a negative, ``[s_GT, s_Negative]``.

:func:`interpret_pair` runs the model on one caption and one or more images and returns the tree with
each concept's scores; :func:`render_text` prints it, :func:`render_figure` draws it (optionally
beside the picture).
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from composer.models.composer.program import ConceptProgram, ProgramBatch
from crg.outputs import write_bytes_atomic

__all__ = ["TreeNode", "CompositionTree", "interpret_pair", "program_from_concepts", "render_text",
           "render_figure"]


@dataclass(frozen=True)
class TreeNode:
    """One concept of the caption with its alignment score on each image.

    Attributes:
        index: node index in the caption's :class:`ConceptProgram`.
        text: the concept's text.
        template: the predicate composing it (``"[NP] is left of [NP]"``); None for a primitive.
        children: child node indices in placeholder order.
        level: 0 for primitives, 1 + the children's highest level otherwise.
        scores: s(x, c) on each image, in :attr:`CompositionTree.image_labels`' order.
    """

    index: int
    text: str
    template: str | None
    children: tuple[int, ...]
    level: int
    scores: tuple[float, ...]


@dataclass(frozen=True)
class CompositionTree:
    """A caption's composition tree with alignment scores; ``nodes[root]`` is the sentence."""

    nodes: tuple[TreeNode, ...]
    root: int
    image_labels: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"root": self.root, "image_labels": list(self.image_labels),
                "nodes": [asdict(n) for n in self.nodes]}


def program_from_concepts(root) -> ConceptProgram:
    """The program of a :class:`crg.extract.ConceptNode` tree (a freshly parsed caption).

    >>> from nltk import Tree
    >>> from crg.extract import extract_concepts
    >>> t = Tree.fromstring("(S (NP (DT a) (JJ red) (NN ball)) (VP (VBZ is) (ADJP (JJ left) (PP (IN of) "
    ...                     "(NP (DT a) (NN cube))))))")
    >>> program_from_concepts(extract_concepts(t)).texts
    ('ball', 'cube', 'a red ball', 'a cube', 'a red ball is left of a cube')
    """
    steps = [(n.text, n.predicate.template, [c.text for c in n.children])
             for n in root.walk_bottom_up() if n.predicate is not None]
    return ConceptProgram.from_derivations(steps, root=root.text)


@torch.no_grad()
def interpret_pair(model, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                   program: ConceptProgram, tokenizer, *, image_labels=None) -> CompositionTree:
    """Score every concept of ``program`` on each of M images.

    Args:
        model: a :class:`composer.models.composer.model.Composer` (its ``forward`` returns every node's score); it is
            run in eval mode and its mode restored.
        regions, geometry, region_mask: (M, R, Dr), (M, R, 5), (M, R) bool -- image 0 is the one the
            caption is read against (Figure 5's ground truth), any others are compared (negatives).
        program: the caption's composition; tokenizer: the model's.
        image_labels: (M,) names of the images (default ``image0``, ``image1``, ...).
    """
    m = regions.shape[0]
    labels = tuple(image_labels) if image_labels is not None else tuple(f"image{i}" for i in range(m))
    if len(labels) != m:
        raise ValueError(f"{len(labels)} image labels for {m} images")
    device = regions.device
    batch = ProgramBatch.collate([program], tokenizer)
    was_training = model.training
    model.eval()
    try:
        out = model(regions, geometry, region_mask, batch, torch.arange(m, device=device),
                    torch.zeros(m, dtype=torch.long, device=device))
    finally:
        model.train(was_training)
    n = program.num_nodes
    scores = out.node_scores[:, :n].float().cpu().numpy().T                  # (N, M)
    nodes = tuple(TreeNode(i, program.texts[i], program.templates[i], program.children[i], program.levels[i],
                           tuple(float(s) for s in scores[i])) for i in range(n))
    return CompositionTree(nodes, program.root, labels)


def _format_scores(scores: tuple[float, ...]) -> str:
    return "[" + ", ".join(f"{s:+.3f}" for s in scores) + "]"


def render_text(tree: CompositionTree) -> str:
    """The tree as indented text, root first, each concept with its scores (and its template).

    >>> t = CompositionTree((TreeNode(0, "ball", None, (), 0, (0.5, -0.25)),
    ...                      TreeNode(1, "a red ball", "a red [NN]", (0,), 1, (1.0, 0.0))), 1, ("gt", "neg"))
    >>> print(render_text(t))
    scores [gt, neg]
    [+1.000, +0.000]  a red ball    = a red [NN]
      [+0.500, -0.250]  ball
    """
    lines = ["scores [" + ", ".join(tree.image_labels) + "]"]

    def visit(i: int, depth: int) -> None:
        node = tree.nodes[i]
        line = "  " * depth + f"{_format_scores(node.scores)}  {node.text}"
        if node.template is not None:
            line += f"    = {node.template}"
        lines.append(line)
        for c in node.children:
            visit(c, depth + 1)

    visit(tree.root, 0)
    return "\n".join(lines)


def _layout(tree: CompositionTree) -> list[tuple[int, float, int, int | None]]:
    """Drawing positions: ``(node, x, y, parent slot)`` for every node occurrence, leaves on consecutive x.

    The program is a DAG (a concept used twice appears twice in the drawing); y is the node's level.
    """
    slots: list[tuple[int, float, int, int | None]] = []
    next_leaf = [0.0]

    def place(i: int, parent: int | None) -> float:
        me = len(slots)
        slots.append((i, 0.0, tree.nodes[i].level, parent))
        kids = tree.nodes[i].children
        if kids:
            x = float(np.mean([place(c, me) for c in kids]))
        else:
            x = next_leaf[0]
            next_leaf[0] += 1.0
        slots[me] = (i, x, tree.nodes[i].level, parent)
        return x

    place(tree.root, None)
    return slots


def render_figure(tree: CompositionTree, path: str | Path, image=None, *, title: str | None = None,
                  color_by: int = 0, dpi: int = 120) -> Path:
    """Draw the tree, each concept coloured by its score on image ``color_by`` and labelled with all its
    scores (Figure 5's ``[s_GT, s_Negative]``). ``image`` puts pictures to the left: one picture (a PIL
    image, an (H, W, 3) array or a file path) of the first image, or a sequence with one per scored image
    (None to leave one out). Writes ``path`` (PNG) and returns it.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure

    if not 0 <= color_by < len(tree.image_labels):
        raise ValueError(f"color_by={color_by}: the tree has scores on {len(tree.image_labels)} images")
    pictures = _pictures(image, tree.image_labels)                     # [(label, (H, W, C))]
    slots = _layout(tree)
    leaves = max(1.0, max(x for _, x, _, _ in slots) + 1.0)
    height = tree.nodes[tree.root].level + 1
    tree_w, tree_h = max(4.0, 2.3 * leaves), max(2.5, 1.4 * height + 0.8)
    fig_h = max(tree_h, 2.2 * len(pictures))
    pic_w = max((fig_h / max(len(pictures), 1) * p.shape[1] / p.shape[0] for _, p in pictures), default=0.0)
    top, bar = (0.4 if title else 0.0), 0.9                           # inches: title, colour bar and its labels
    total_w = tree_w + pic_w + bar
    fig = Figure(figsize=(total_w, fig_h + top))
    FigureCanvasAgg(fig)
    frac_w, frac_h = pic_w / total_w, fig_h / (fig_h + top)
    for k, (label, picture) in enumerate(pictures):
        h = frac_h / len(pictures)
        ax_img = fig.add_axes((0.0, frac_h - (k + 1) * h, frac_w, h * 0.92))
        ax_img.imshow(picture)
        ax_img.set_axis_off()
        ax_img.set_title(label, fontsize=8)
    ax = fig.add_axes((frac_w, 0.0, tree_w / total_w, frac_h))
    ax.set_axis_off()
    if title:
        fig.suptitle(title, fontsize=10)

    values = np.array([n.scores[color_by] for n in tree.nodes])
    bound = max(float(np.abs(values).max()), 1e-6)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-bound, vmax=bound)
    cmap = matplotlib.colormaps["RdYlGn"]
    for _, x, y, parent in slots:
        if parent is not None:
            _, px, py, _ = slots[parent]
            ax.plot([x, px], [y, py], color="0.55", lw=1.0, zorder=1)
    for node_i, x, y, _ in slots:
        node = tree.nodes[node_i]
        label = textwrap.fill(node.text, 24) + "\n" + _format_scores(node.scores)
        face = cmap(norm(node.scores[color_by]))
        dark = 0.299 * face[0] + 0.587 * face[1] + 0.114 * face[2] < 0.5     # luminance: white text on dark boxes
        ax.text(x, y, label, ha="center", va="center", fontsize=7, zorder=2, color="white" if dark else "black",
                bbox={"boxstyle": "round,pad=0.3", "facecolor": face, "edgecolor": "0.3"})
    ax.set_xlim(-0.7, leaves - 0.3)
    ax.set_ylim(-0.6, height - 0.4)
    ax_bar = fig.add_axes(((pic_w + tree_w + 0.15) / total_w, 0.2 * frac_h, 0.15 / total_w, 0.6 * frac_h))
    cbar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), cax=ax_bar)
    cbar.set_label(f"score on {tree.image_labels[color_by]}", fontsize=7)
    cbar.ax.tick_params(labelsize=6)
    path = Path(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format="png")
    write_bytes_atomic(path, buffer.getvalue())  # never half a picture after a kill
    return path


def _pictures(image, labels: tuple[str, ...]) -> list[tuple[str, np.ndarray]]:
    """``(label, array)`` of each picture to draw."""
    if image is None:
        return []
    if isinstance(image, (list, tuple)):
        if len(image) > len(labels):
            raise ValueError(f"{len(image)} pictures for {len(labels)} scored images")
        return [(labels[k], _as_array(im)) for k, im in enumerate(image) if im is not None]
    return [(labels[0], _as_array(image))]


def _as_array(image) -> np.ndarray:
    """An (H, W, C) array from a PIL image, an array or a picture's path."""
    if isinstance(image, (str, Path)):
        from PIL import Image

        with Image.open(image) as im:
            return np.asarray(im.convert("RGB"))
    arr = np.asarray(image)
    if arr.ndim not in (2, 3):
        raise ValueError(f"image must be (H, W) or (H, W, C), got shape {arr.shape}")
    return arr
