"""Captions as composition programs, batched for level-by-level recursion.

A caption's composition (the CRG's derivations ``parent = predicate(children...)``, bottom-up)
becomes a :class:`ConceptProgram`: its **distinct** concepts as nodes, each either a primitive
(one word) or composed by a predicate template from child nodes in placeholder order. Nodes are
ordered by *level* -- 0 for primitives, ``1 + max(children's levels)`` for composed concepts (a
0-ary predicate gives level 1) -- so children always precede parents; the root (the sentence) is
the last node. A one-noun caption ("dogs") is a single primitive node that is also the root.

:meth:`ProgramBatch.collate` turns C programs into tensors:

* text side, independent of images: the P distinct templates (``[CLS] ... [SEP]`` ids, masks and
  placeholder positions) and the U distinct primitive words (sub-word ids and masks);
* **sub-trees**: the G distinct computations in the batch. A primitive sub-tree is a word; a
  composed one is a (template, child sub-trees) tuple. Two captions sharing "a man" share its
  sub-tree, so on the same image it is computed once;
* per caption, padded to N nodes and E edges: each node's sub-tree, level, kind, and the caption's
  distinct (parent, child) edges as local node indices (the order loss's pairs).

:func:`plan_execution` then maps Q (image, caption) pairs to **work items** -- distinct
(image, sub-tree) pairs sorted by level -- so that the model computes each level for all pairs in
one call: all primitives through the primitive encoder, then every composed concept of level 1 in
one Composition Transformer call, then level 2, and so on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

from composer.models.composer.predicate_transformer import EncodedTemplates, EncodedTokens, TemplateTokenizer, placeholder_type

__all__ = ["ConceptProgram", "ExecutionPlan", "ProgramBatch", "plan_execution", "template_arity"]

log = logging.getLogger(__name__)


def template_arity(template: str) -> int:
    """Number of placeholders in a template.

    >>> template_arity("[NP] are running on [NP]"), template_arity("it is raining")
    (2, 0)
    """
    return sum(placeholder_type(w) is not None for w in template.split())


@dataclass(frozen=True)
class ConceptProgram:
    """One caption's composition as its distinct concepts, children before parents.

    Attributes:
        texts: (N,) each node's concept text.
        templates: (N,) the predicate template composing the node; None for a primitive.
        children: (N,) child node indices in placeholder order (empty for primitives and 0-ary predicates).
        levels: (N,) 0 for primitives, 1 + max(children's levels) for composed nodes; non-decreasing.
        root: index of the sentence node, always ``N - 1``.
        concept_ids: (N,) the CRG's concept ids when built from a graph, else None.
    """

    texts: tuple[str, ...]
    templates: tuple[str | None, ...]
    children: tuple[tuple[int, ...], ...]
    levels: tuple[int, ...]
    root: int
    concept_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.texts)
        if n == 0:
            raise ValueError("a program needs at least one node")
        if not (len(self.templates) == len(self.children) == len(self.levels) == n):
            raise ValueError(f"program fields disagree in length: texts {n}, templates {len(self.templates)}, "
                             f"children {len(self.children)}, levels {len(self.levels)}")
        if self.root != n - 1:
            raise ValueError(f"the root must be the last node ({n - 1}), got {self.root}")
        for i, (tpl, kids, lvl) in enumerate(zip(self.templates, self.children, self.levels)):
            if tpl is None:
                if kids or lvl != 0:
                    raise ValueError(f"node {i} ({self.texts[i]!r}) is a primitive but has children {kids} or "
                                     f"level {lvl}")
                continue
            if template_arity(tpl) != len(kids):
                raise ValueError(f"node {i} ({self.texts[i]!r}): template {tpl!r} takes {template_arity(tpl)} "
                                 f"arguments, got {len(kids)} children")
            if any(not 0 <= k < i for k in kids):
                raise ValueError(f"node {i} ({self.texts[i]!r}): children {kids} must precede it")
            if lvl != 1 + max((self.levels[k] for k in kids), default=0):
                raise ValueError(f"node {i} ({self.texts[i]!r}): level {lvl} inconsistent with its children")

    @property
    def num_nodes(self) -> int:
        return len(self.texts)

    @property
    def height(self) -> int:
        """The root's level."""
        return self.levels[self.root]

    def is_primitive(self, node: int) -> bool:
        return self.templates[node] is None

    def edges(self) -> list[tuple[int, int]]:
        """Distinct (parent, child) node pairs, parents in node order."""
        out: list[tuple[int, int]] = []
        for parent, kids in enumerate(self.children):
            for child in dict.fromkeys(kids):
                out.append((parent, child))
        return out

    def index(self, text: str) -> int:
        """The node holding a concept text (lower-cased, single-spaced)."""
        key = " ".join(text.lower().split())
        try:
            return self.texts.index(key)
        except ValueError:
            raise KeyError(f"no concept {key!r} in this program; concepts: {list(self.texts)}") from None

    def subprogram(self, node: int) -> ConceptProgram:
        """The program of one node's sub-tree, rooted at it (e.g. for phrase-to-image retrieval)."""
        below, stack = set(), [node]
        while stack:
            i = stack.pop()
            if i not in below:
                below.add(i)
                stack.extend(self.children[i])
        steps = [(i, self.templates[i], self.children[i]) for i in sorted(below) if self.templates[i] is not None]
        ids = self.concept_ids
        return _build(steps, node, lambda i: self.texts[i], (lambda i: ids[i]) if ids is not None else None)

    @classmethod
    def from_derivations(cls, derivations: Sequence[tuple[str, str, Sequence[str]]], *,
                         root: str | None = None) -> ConceptProgram:
        """Build from explicit ``(parent, template, children)`` steps (any order; the CRG lists them bottom-up).

        Texts not produced by any step are primitives. ``root`` defaults to the last step's parent;
        a caption without steps (a one-noun sentence) must name it.

        >>> p = ConceptProgram.from_derivations([
        ...     ("two dogs", "two [NNS]", ["dogs"]), ("the grass", "the [NN]", ["grass"]),
        ...     ("two dogs run on the grass", "[NP] run on [NP]", ["two dogs", "the grass"])])
        >>> p.texts
        ('dogs', 'grass', 'two dogs', 'the grass', 'two dogs run on the grass')
        >>> p.levels, p.children[-1], p.edges()[-2:]
        ((0, 0, 1, 1, 2), (2, 3), [(4, 2), (4, 3)])
        >>> ConceptProgram.from_derivations([], root="dogs").templates
        (None,)
        """
        if root is None:
            if not derivations:
                raise ValueError("a program without derivations is a single primitive: pass root='word'")
            root = derivations[-1][0]
        steps = [(parent, template, tuple(children)) for parent, template, children in derivations]
        return _build(steps, root, lambda t: t, None)

    @classmethod
    def from_graph(cls, graph, caption: int) -> ConceptProgram:
        """The program of caption ``caption`` of a :class:`crg.graph.ConceptGraph`."""
        steps = [(d.parent, d.predicate.template, d.children) for d in graph.caption_derivations(caption)]
        root = int(graph.caption_root[caption])
        return _build(steps, root, lambda c: graph.concept_texts[c], lambda c: int(c))


def _build(steps: Sequence[tuple[Hashable, str, Sequence[Hashable]]], root: Hashable,
           text_of: Callable[[Hashable], str], id_of: Callable[[Hashable], int] | None) -> ConceptProgram:
    derivation: dict[Hashable, tuple[str, tuple]] = {}
    dropped_duplicate = False
    for parent, template, children in steps:
        if parent in derivation:
            if derivation[parent] != (template, tuple(children)):
                log.debug("concept %r is derived twice in one caption; keeping the first derivation",
                          text_of(parent))
                dropped_duplicate = True
            continue
        derivation[parent] = (template, tuple(children))

    order: list[Hashable] = []  # post-order: children first, in placeholder order
    level: dict[Hashable, int] = {}

    def visit(key: Hashable, path: tuple) -> int:
        if key in level:
            return level[key]
        if key in path:
            raise ValueError(f"derivations form a cycle through {text_of(key)!r}")
        if key not in derivation:
            lvl = 0
        else:
            lvl = 1 + max((visit(c, path + (key,)) for c in derivation[key][1]), default=0)
        level[key] = lvl
        order.append(key)
        return lvl

    visit(root, ())
    unused = [p for p in derivation if p not in level]
    if unused and dropped_duplicate:
        # e.g. "... in front of a ring and ... in front of a ring" with the two parses of "in front of a
        # ring" pruned differently (Table 7): the dropped derivation was the only one using "a ring"
        log.debug("dropping derivations of %s: only a discarded duplicate derivation used them",
                  [text_of(p) for p in unused])
        for p in unused:
            del derivation[p]
    elif unused:
        raise ValueError(f"derivations of {[text_of(p) for p in unused]} are not below the root "
                         f"{text_of(root)!r}")
    order.sort(key=lambda k: level[k])  # stable: first appearance within a level
    index = {k: i for i, k in enumerate(order)}
    templates = tuple(derivation[k][0] if k in derivation else None for k in order)
    children = tuple(tuple(index[c] for c in derivation[k][1]) if k in derivation else () for k in order)
    return ConceptProgram(
        texts=tuple(text_of(k) for k in order), templates=templates, children=children,
        levels=tuple(level[k] for k in order), root=len(order) - 1,
        concept_ids=tuple(id_of(k) for k in order) if id_of is not None else None)


@dataclass
class ProgramBatch:
    """C caption programs as tensors: text inputs, distinct sub-trees, per-caption nodes and edges.

    Sizes: P templates (T tokens, A = max arity), U primitive words (S sub-words), G sub-trees,
    C captions padded to N nodes and E edges. All index tensors are long; padding is -1 for
    indices into other tables and 0 for local indices guarded by a mask (True = real entry).
    """

    programs: list[ConceptProgram]      # (C,)
    templates: list[str]                # (P,)
    template_tokens: EncodedTemplates   # ids / mask (P, T), placeholder_positions / _mask / _types (P, A),
                                        # placeholder_slot (P, T)
    words: list[str]                    # (U,)
    word_tokens: EncodedTokens          # ids / mask (U, S)
    subtree_level: torch.Tensor         # (G,) 0 for primitives
    subtree_primitive: torch.Tensor     # (G,) index into words; -1 for composed sub-trees
    subtree_predicate: torch.Tensor     # (G,) index into templates; -1 for primitives
    subtree_children: torch.Tensor      # (G, A) child sub-trees in placeholder order; -1 padding
    node_subtree: torch.Tensor          # (C, N) each node's sub-tree; -1 padding
    node_mask: torch.Tensor             # (C, N) bool, True = real node
    node_level: torch.Tensor            # (C, N) -1 padding
    root: torch.Tensor                  # (C,) local index of the root node
    edge_parent: torch.Tensor           # (C, E) local node index; 0 padding
    edge_child: torch.Tensor            # (C, E) local node index; 0 padding
    edge_mask: torch.Tensor             # (C, E) bool, True = real edge

    @property
    def num_captions(self) -> int:
        return len(self.programs)

    @property
    def num_subtrees(self) -> int:
        return int(self.subtree_level.shape[0])

    @property
    def node_is_primitive(self) -> torch.Tensor:
        """(C, N) bool."""
        return self.node_mask & (self.subtree_predicate[self.node_subtree.clamp_min(0)] < 0)

    @property
    def node_is_root(self) -> torch.Tensor:
        """(C, N) bool."""
        N = self.node_mask.shape[1]
        return torch.arange(N, device=self.root.device)[None, :] == self.root[:, None]

    @classmethod
    def from_graph(cls, graph, captions: Sequence[int], tokenizer: TemplateTokenizer) -> ProgramBatch:
        """Collate the programs of captions ``captions`` of a :class:`crg.graph.ConceptGraph`."""
        return cls.collate([ConceptProgram.from_graph(graph, int(c)) for c in captions], tokenizer)

    @classmethod
    def collate(cls, programs: Sequence[ConceptProgram], tokenizer: TemplateTokenizer) -> ProgramBatch:
        """Tokenize and index C programs (templates and words are tokenized once each)."""
        if not programs:
            raise ValueError("cannot collate an empty list of programs")
        templates: dict[str, int] = {}
        words: dict[str, int] = {}
        subtrees: dict[tuple, int] = {}
        sub_rows: list[tuple[int, int, int, tuple[int, ...]]] = []  # (level, primitive, predicate, children)
        node_subtrees: list[list[int]] = []
        for prog in programs:
            local: list[int] = []
            for text, tpl, kids, lvl in zip(prog.texts, prog.templates, prog.children, prog.levels):
                if tpl is None:
                    key: tuple = ("w", words.setdefault(text, len(words)))
                    row = (0, key[1], -1, ())
                else:
                    pid = templates.setdefault(tpl, len(templates))
                    kid_subs = tuple(local[k] for k in kids)
                    key = ("t", pid, kid_subs)
                    row = (lvl, -1, pid, kid_subs)
                sid = subtrees.get(key)
                if sid is None:
                    sid = subtrees[key] = len(sub_rows)
                    sub_rows.append(row)
                local.append(sid)
            node_subtrees.append(local)

        template_list, word_list = list(templates), list(words)
        enc_templates = tokenizer.encode_templates(template_list)
        enc_words = tokenizer.encode_words(word_list)
        A = enc_templates.placeholder_mask.shape[1]
        # padded rows built as Python lists, one tensor each (a torch.tensor call per row costs more than the row)
        sub_children = torch.tensor([list(kids) + [-1] * (A - len(kids)) for _, _, _, kids in sub_rows],
                                    dtype=torch.long).view(len(sub_rows), A)           # (G, A)

        N = max(p.num_nodes for p in programs)
        all_edges = [p.edges() for p in programs]
        E = max((len(e) for e in all_edges), default=0)
        node_subtree = torch.tensor([local + [-1] * (N - len(local)) for local in node_subtrees],
                                    dtype=torch.long)                                   # (C, N)
        node_level = torch.tensor([list(p.levels) + [-1] * (N - p.num_nodes) for p in programs],
                                  dtype=torch.long)                                     # (C, N)
        edge_parent = torch.tensor([[e[0] for e in edges] + [0] * (E - len(edges)) for edges in all_edges],
                                   dtype=torch.long).view(len(programs), E)             # (C, E)
        edge_child = torch.tensor([[e[1] for e in edges] + [0] * (E - len(edges)) for edges in all_edges],
                                  dtype=torch.long).view(len(programs), E)              # (C, E)
        edge_mask = torch.tensor([[True] * len(edges) + [False] * (E - len(edges)) for edges in all_edges],
                                 dtype=torch.bool).view(len(programs), E)               # (C, E)
        return cls(
            programs=list(programs), templates=template_list, template_tokens=enc_templates, words=word_list,
            word_tokens=enc_words,
            subtree_level=torch.tensor([r[0] for r in sub_rows], dtype=torch.long),
            subtree_primitive=torch.tensor([r[1] for r in sub_rows], dtype=torch.long),
            subtree_predicate=torch.tensor([r[2] for r in sub_rows], dtype=torch.long),
            subtree_children=sub_children, node_subtree=node_subtree, node_mask=node_subtree >= 0,
            node_level=node_level, root=torch.tensor([p.root for p in programs], dtype=torch.long),
            edge_parent=edge_parent, edge_child=edge_child, edge_mask=edge_mask)


@dataclass
class ExecutionPlan:
    """Distinct (image, sub-tree) work items for Q pairs, sorted by level, with their dependencies.

    W work items; items of level ``l`` are ``range(level_ptr[l], level_ptr[l + 1])`` (level 0 =
    primitives). A child's work index is always smaller than its parent's.
    """

    work_image: torch.Tensor      # (W,) image index
    work_subtree: torch.Tensor    # (W,) sub-tree index into the ProgramBatch
    work_children: torch.Tensor   # (W, A) work indices of the children in placeholder order; -1 padding
    level_ptr: list[int]          # (L + 2,) offsets of each level's items
    pair_node_work: torch.Tensor  # (Q, N) work item of each pair's node; -1 padding

    @property
    def num_levels(self) -> int:
        return len(self.level_ptr) - 1

    def level(self, lvl: int) -> slice:
        return slice(self.level_ptr[lvl], self.level_ptr[lvl + 1])


def plan_execution(programs: ProgramBatch, pair_image: torch.Tensor, pair_caption: torch.Tensor,
                   num_images: int) -> ExecutionPlan:
    """Work items for pairs ``(pair_image[q], pair_caption[q])``; indices live on ``programs``' device.

    A node needed by several pairs on the same image (the same caption paired twice, or a sub-tree
    two captions share) becomes one work item.
    """
    device = programs.node_subtree.device
    pair_image = pair_image.to(device=device, dtype=torch.long)
    pair_caption = pair_caption.to(device=device, dtype=torch.long)
    if pair_image.shape != pair_caption.shape or pair_image.dim() != 1:
        raise ValueError(f"pair_image {tuple(pair_image.shape)} and pair_caption {tuple(pair_caption.shape)} "
                         f"must be equal-length vectors")
    if len(pair_image) and (int(pair_image.min()) < 0 or int(pair_image.max()) >= num_images):
        raise ValueError(f"pair_image holds indices outside [0, {num_images}): {pair_image.tolist()}")
    if len(pair_caption) and (int(pair_caption.min()) < 0 or int(pair_caption.max()) >= programs.num_captions):
        raise ValueError(f"pair_caption holds indices outside [0, {programs.num_captions}): {pair_caption.tolist()}")
    G = programs.num_subtrees
    IG = num_images * G
    sub = programs.node_subtree[pair_caption]                           # (Q, N)
    valid = sub >= 0                                                    # (Q, N)
    sub0 = sub.clamp_min(0)
    sort_key = programs.subtree_level[sub0] * IG + pair_image[:, None] * G + sub0  # (Q, N) level, image, sub-tree
    keys, inverse = torch.unique(sort_key[valid], sorted=True, return_inverse=True)  # (W,), (valid,)
    pair_node_work = torch.full_like(sub, -1)
    pair_node_work[valid] = inverse
    work_level = keys // IG
    work_image = (keys % IG) // G
    work_subtree = keys % G
    child_sub = programs.subtree_children[work_subtree]                 # (W, A)
    has_child = child_sub >= 0
    child_sub0 = child_sub.clamp_min(0)
    child_key = programs.subtree_level[child_sub0] * IG + work_image[:, None] * G + child_sub0  # (W, A)
    child_work = torch.searchsorted(keys, child_key).clamp_max(max(len(keys) - 1, 0))      # (W, A)
    if has_child.any():
        assert bool((keys[child_work][has_child] == child_key[has_child]).all()), "a child is missing from the plan"
    work_children = torch.where(has_child, child_work, torch.full_like(child_work, -1))
    num_levels = int(work_level.max()) + 1 if len(keys) else 0
    counts = torch.bincount(work_level, minlength=num_levels)
    level_ptr = [0] + torch.cumsum(counts, 0).tolist()
    return ExecutionPlan(work_image=work_image, work_subtree=work_subtree, work_children=work_children,
                         level_ptr=level_ptr, pair_node_work=pair_node_work)
