"""COMPOSER (Zhang et al., 2021): recursive, visually grounded concept composition.

``Composer.forward`` evaluates Q (image, caption) pairs level by level (:mod:`composer.models.composer.program`):

1. the Predicate Transformer encodes each distinct template used by the pairs once (text only);
2. every (image, primitive) work item goes through the primitive encoder in one call;
3. for each level l = 1, 2, ...: all composed concepts of level l, over all pairs, go through the
   modulator and the Composition Transformer in one call, reading their children's embeddings
   from the levels below;
4. theta scores every concept embedding.

Every intermediate concept's embedding and score is returned, in a padded per-pair layout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from composer.models.composer.composition_transformer import AlignmentScorer, CompositionTransformer, PackedTokens
from composer.models.composer.config import ComposerConfig
from composer.models.composer.film import Modulator
from composer.models.composer.losses import OrderScores
from composer.models.composer.predicate_transformer import PredicateTransformer, TemplateTokenizer
from composer.models.composer.primitive_encoder import PrimitiveEncoder
from composer.models.common.pretrained import PretrainedModel
from composer.models.composer.program import ConceptProgram, ExecutionPlan, ProgramBatch, plan_execution

__all__ = ["Composer", "ComposerOutput", "check_visual_inputs"]

log = logging.getLogger(__name__)


@dataclass
class ComposerOutput:
    """Embeddings and scores of every concept of every pair.

    Node ``n`` of pair ``q`` is node ``n`` of ``programs.programs[pair_caption[q]]`` (children before
    parents; the root is the last real node). Padding entries hold 0 and are False in the masks.
    """

    root_scores: torch.Tensor        # (Q,) s(x, y) of the sentence
    root_embeddings: torch.Tensor    # (Q, D) v(x, y)
    node_scores: torch.Tensor        # (Q, N) s(x, c) of every concept c of the caption
    node_embeddings: torch.Tensor    # (Q, N, D) v(x, c)
    node_mask: torch.Tensor          # (Q, N) bool, True = real node
    node_level: torch.Tensor         # (Q, N) long, 0 = primitive; -1 padding
    node_is_primitive: torch.Tensor  # (Q, N) bool
    node_is_root: torch.Tensor       # (Q, N) bool, the sentence concept
    edge_parent: torch.Tensor        # (Q, E) long local node index of each (parent, child) edge; 0 padding
    edge_child: torch.Tensor         # (Q, E) long
    edge_mask: torch.Tensor          # (Q, E) bool, True = real edge
    num_work_items: int              # distinct (image, sub-tree) computations that were run

    def edge_scores(self) -> OrderScores:
        """Scores of the parent and child of every edge, for :func:`composer.models.composer.losses.order_loss`."""
        return OrderScores(parent=self.node_scores.gather(1, self.edge_parent),
                           child=self.node_scores.gather(1, self.edge_child), mask=self.edge_mask)

    def concept_mask(self, *, include_sentence: bool = True, include_primitives: bool = False) -> torch.Tensor:
        """(Q, N) bool: the concepts MVSA sums over.

        §3.3 defines C with ``y in C`` and ``U not in C``: the sentence counts, primitives do not
        (the defaults). Use ``include_sentence=False`` when the sentence is already trained by l_MATCH.
        """
        mask = self.node_mask.clone()
        if not include_sentence:
            mask &= ~self.node_is_root
        if not include_primitives:
            mask &= ~self.node_is_primitive
        return mask


def check_visual_inputs(regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor) -> None:
    """Raise ValueError unless regions (I, R, Dr), geometry (I, R, Dg), region_mask (I, R) bool agree."""
    if regions.dim() != 3 or geometry.dim() != 3 or region_mask.dim() != 2:
        raise ValueError(f"expected regions (I, R, Dr), geometry (I, R, Dg), region_mask (I, R); got "
                         f"{tuple(regions.shape)}, {tuple(geometry.shape)}, {tuple(region_mask.shape)}")
    if regions.shape[:2] != geometry.shape[:2] or regions.shape[:2] != region_mask.shape:
        raise ValueError(f"regions {tuple(regions.shape)}, geometry {tuple(geometry.shape)} and region_mask "
                         f"{tuple(region_mask.shape)} disagree on (I, R)")
    if region_mask.dtype != torch.bool:
        raise ValueError(f"region_mask must be bool (True = real region), got {region_mask.dtype}")
    if regions.shape[0] and not bool(region_mask.any(1).all()):
        empty = torch.nonzero(~region_mask.any(1)).flatten().tolist()
        raise ValueError(f"images {empty} have no real region; attention over no keys is undefined -- "
                         f"drop them or give them one (e.g. a whole-image box)")


class Composer(PretrainedModel, nn.Module):
    """Primitive encoder, Predicate Transformer, modulator, Composition Transformer and scorer (§3).

    ``save_pretrained(directory)`` / ``Composer.from_pretrained(directory)``: :mod:`composer.models.common.pretrained`.
    """

    model_type = "composer"
    config_class = ComposerConfig

    def __init__(self, cfg: ComposerConfig, *, load_pretrained: bool = True):
        super().__init__()
        self.config = cfg
        self.predicate_transformer = PredicateTransformer.from_config(cfg, load_pretrained=load_pretrained)
        self.primitive_encoder = PrimitiveEncoder(cfg)
        self.modulator = Modulator(cfg)
        self.composition_transformer = CompositionTransformer(cfg)
        self.scorer = AlignmentScorer(cfg.text.hidden_size, cfg.text.initializer_range)
        # False: the padded reference path (every token of every layer), kept to test the fast one against
        self.fast_path = True

    @classmethod
    def from_config(cls, cfg: ComposerConfig, *, load_pretrained: bool = True) -> Composer:
        """Build; the PT loads ``cfg.text_model`` unless ``load_pretrained=False`` or it is None."""
        model = cls(cfg, load_pretrained=load_pretrained)
        log.info("COMPOSER: %.1fM parameters (PT %d layers, CT %d layers, modulator %s, primitive CrossAtt %s)",
                 sum(p.numel() for p in model.parameters()) / 1e6, cfg.pt_layers, cfg.ct_layers, cfg.modulator,
                 cfg.primitive_cross_attention)
        return model

    def make_tokenizer(self) -> TemplateTokenizer:
        """The tokenizer that builds :class:`ProgramBatch` inputs for this model (the configured vocabulary,
        or the one saved beside the weights when the model was loaded with :meth:`from_pretrained`)."""
        if self.pretrained_dir is None:
            return TemplateTokenizer.from_config(self.config)
        return TemplateTokenizer.from_pretrained(str(self.pretrained_dir),
                                                 max_length=self.config.text.max_position_embeddings,
                                                 vocab_size=self.config.text.vocab_size)

    def forward(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                programs: ProgramBatch, pair_image: torch.Tensor, pair_caption: torch.Tensor) -> ComposerOutput:
        """Compose and score every concept of each (image, caption) pair.

        Args:
            regions: (I, R, Dr) region features of the batch's images.
            geometry: (I, R, Dg) normalised box geometry.
            region_mask: (I, R) bool, True = real region (every image needs one).
            programs: C caption programs (:meth:`ProgramBatch.collate`).
            pair_image: (Q,) long, image of each pair; pair_caption: (Q,) long, caption of each pair.

        Returns:
            :class:`ComposerOutput` in the per-pair layout.
        """
        plan, table = self._execute(regions, geometry, region_mask, programs, pair_image, pair_caption)  # (W, D)
        device = regions.device
        scores = self.scorer(table)                                             # (W,)

        work = plan.pair_node_work.to(device)                                   # (Q, N)
        valid = work >= 0
        node_embeddings = table[work.clamp_min(0)] * valid[..., None].to(table.dtype)  # (Q, N, D)
        node_scores = scores[work.clamp_min(0)] * valid.to(scores.dtype)               # (Q, N)
        cap = pair_caption.to(device=programs.root.device, dtype=torch.long)
        root = programs.root[cap].to(device)                                    # (Q,)
        rows = torch.arange(len(root), device=device)
        return ComposerOutput(
            root_scores=node_scores[rows, root], root_embeddings=node_embeddings[rows, root],
            node_scores=node_scores, node_embeddings=node_embeddings, node_mask=valid,
            node_level=programs.node_level[cap].to(device),
            node_is_primitive=programs.node_is_primitive[cap].to(device),
            node_is_root=programs.node_is_root[cap].to(device),
            edge_parent=programs.edge_parent[cap].to(device), edge_child=programs.edge_child[cap].to(device),
            edge_mask=programs.edge_mask[cap].to(device), num_work_items=len(plan.work_image))

    def score_pairs(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                    programs: ProgramBatch, pair_image: torch.Tensor, pair_caption: torch.Tensor) -> torch.Tensor:
        """(Q,) sentence scores s(x, y) of each pair (same arguments as :meth:`forward`): :meth:`forward`'s
        ``root_scores``, without laying out every node's embedding."""
        if not self.fast_path:
            return self.forward(regions, geometry, region_mask, programs, pair_image, pair_caption).root_scores
        return self._root_scores(regions, geometry, region_mask, programs, pair_image, pair_caption)

    def _root_scores(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                     programs: ProgramBatch, pair_image: torch.Tensor, pair_caption: torch.Tensor,
                     template_states: torch.Tensor | None = None) -> torch.Tensor:
        """(Q,) root scores; ``template_states`` as in :meth:`_run`."""
        plan, table = self._execute(regions, geometry, region_mask, programs, pair_image, pair_caption,
                                    template_states)                            # (W, D)
        cap = pair_caption.to(device=programs.root.device, dtype=torch.long)
        root = programs.root[cap]                                               # (Q,) local node index
        root_work = plan.pair_node_work[torch.arange(len(root), device=root.device), root]  # (Q,)
        return self.scorer(table[root_work.to(table.device)])                   # (Q,)

    @torch.no_grad()
    def score_all(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                  programs: Sequence[ConceptProgram], tokenizer: TemplateTokenizer, *, max_pairs: int = 4096,
                  on_chunk: Callable[[], None] | None = None) -> torch.Tensor:
        """(C, I) score of every caption on every image (what :func:`composer.models.common.retrieval.score_matrix` asks
        a model that has a faster way than pair-by-pair chunks).

        Why faster: the captions are collated once and taken together (up to ``max_pairs``) against a few
        images at a time, so a sub-tree that many captions share ("a red cube") is composed once per image
        rather than once per caption chunk, and each image's regions are embedded once (only the chunk's
        images enter a call). Each call holds at most ``max_pairs`` pairs, as the pair-by-pair loop does.
        ``on_chunk`` is called after each chunk (a progress bar).
        """
        n_img, n_cap = regions.shape[0], len(programs)
        device = regions.device
        out = torch.empty(n_cap, n_img, device=device)
        caps_per_chunk = max(1, min(n_cap, max_pairs))
        images_per_chunk = max(1, max_pairs // caps_per_chunk)
        for c0 in range(0, n_cap, caps_per_chunk):
            batch = ProgramBatch.collate(programs[c0:c0 + caps_per_chunk], tokenizer)
            caps = torch.arange(batch.num_captions, device=device)
            template_states = None
            if self.fast_path and batch.templates:  # text only: once for all image chunks
                tokens = batch.template_tokens
                template_states = self.predicate_transformer(tokens.ids.to(device), tokens.mask.to(device))  # (P, T, D)
            for i0 in range(0, n_img, images_per_chunk):
                i1 = min(n_img, i0 + images_per_chunk)
                imgs = torch.arange(i1 - i0, device=device)
                pair_caption = caps.repeat_interleave(len(imgs))               # (c * i,)
                pair_image = imgs.repeat(len(caps))                            # (c * i,) local to the chunk
                if self.fast_path:
                    s = self._root_scores(regions[i0:i1], geometry[i0:i1], region_mask[i0:i1], batch, pair_image,
                                          pair_caption, template_states)
                else:
                    s = self.score_pairs(regions[i0:i1], geometry[i0:i1], region_mask[i0:i1], batch, pair_image,
                                         pair_caption)
                out[c0:c0 + len(caps), i0:i1] = s.view(len(caps), len(imgs))
                if on_chunk is not None:
                    on_chunk()
        return out

    def _execute(self, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                 programs: ProgramBatch, pair_image: torch.Tensor, pair_caption: torch.Tensor,
                 template_states: torch.Tensor | None = None) -> tuple[ExecutionPlan, torch.Tensor]:
        """Check the inputs, plan the work items and run them: the plan and the (W, D) embeddings."""
        check_visual_inputs(regions, geometry, region_mask)
        if pair_image.numel() == 0:
            raise ValueError("no (image, caption) pairs to score: pair_image is empty")
        plan = plan_execution(programs, pair_image, pair_caption, num_images=regions.shape[0])
        return plan, self._run(plan, programs, regions, geometry, region_mask, template_states)

    def _run(self, plan: ExecutionPlan, programs: ProgramBatch, regions: torch.Tensor, geometry: torch.Tensor,
             region_mask: torch.Tensor, template_states: torch.Tensor | None = None) -> torch.Tensor:
        """Execute the plan level by level; -> (W, D) embedding of every work item.

        ``template_states``: the PT's (P, T, D) output for all of ``programs``' templates, when the caller
        scores the same programs on several image chunks (:meth:`score_all`): the PT is then not run here.
        """
        device = regions.device
        work_image = plan.work_image.to(device)
        work_subtree = plan.work_subtree.to(device)
        work_children = plan.work_children.to(device)
        sub_predicate = programs.subtree_predicate.to(device)
        outputs: list[torch.Tensor] = []

        # level 0: every (image, primitive) item in one primitive-encoder call
        prim = plan.level(0)
        has_primitives = prim.start != prim.stop   # False: only 0-ary concepts ("it is raining") below level 1
        composed = slice(plan.level_ptr[1], plan.level_ptr[-1]) if plan.num_levels > 1 else None
        words = self._word_inputs(plan, programs, prim, device) if has_primitives else None
        if composed is not None:  # the PT's input: each distinct template of the composed items, once
            preds, inv_preds = torch.unique(sub_predicate[work_subtree[composed]], return_inverse=True)  # (P',), (Wc,)
            tmask = programs.template_tokens.mask.to(device)[preds]                   # (P', T)
            T = int(tmask.sum(1).max())
            tmask = tmask[:, :T]
            tids = programs.template_tokens.ids.to(device)[preds][:, :T]              # (P', T)
        word_emb = template_emb = None
        if self.fast_path and words is not None and composed is not None and template_states is None:
            word_emb, template_emb = self._embed_together(words.ids, tids)
        if words is None:
            outputs.append(regions.new_zeros((0, self.config.text.hidden_size)))
        else:
            outputs.append(self._primitives(plan, prim, words, regions, geometry, region_mask, word_emb))
        if composed is None:
            return outputs[0]

        # the PT: each distinct template of the composed items, once
        slots = programs.template_tokens.placeholder_slot.to(device)[preds][:, :T]    # (P', T)
        ph_pos = programs.template_tokens.placeholder_positions.to(device)[preds]     # (P', A)
        if template_states is not None:
            pt_states = template_states.to(device)[preds][:, :T]                      # (P', T, D), 0 at padding
        else:
            pt_states = self.predicate_transformer(tids, tmask, embedded=template_emb)  # (P', T, D)
        ct_visual = self.composition_transformer.encode_visual(regions, geometry, region_mask,
                                                                 packed=self.fast_path)  # (I, R, Dv) | None
        # the first CrossAtt's keys and values over each image, once for every level
        ct_visual_kv = self.composition_transformer.visual_keys(ct_visual) if self.fast_path else None
        D = pt_states.shape[-1]
        if ph_pos.shape[1]:  # the modulator's placeholder-only work, once per predicate
            ph_terms = self.modulator.placeholder_terms(
                pt_states.gather(1, ph_pos[..., None].expand(-1, -1, D)))       # each (P', A, D)
        # each composed item's template length, where the programs live (CPU: no device sync per level)
        item_length = programs.template_tokens.mask.sum(1)[
            programs.subtree_predicate[plan.work_subtree[composed]]]             # (Wc,)

        for lvl in range(1, plan.num_levels):
            items = plan.level(lvl)
            if items.start == items.stop:
                continue
            table = torch.cat(outputs)                                          # (W_<lvl, D)
            p = inv_preds[items.start - composed.start: items.stop - composed.start]  # (n,)
            t = int(item_length[items.start - composed.start: items.stop - composed.start].max())  # longest here
            if self.fast_path:  # real tokens only, [CLS] only in the last layer
                tokens = self._level_tokens(pt_states, ph_terms if ph_pos.shape[1] else None, table,
                                            work_children[items], p, slots[p, :t], tmask[p, :t])
                outputs.append(self.composition_transformer(
                    tokens, None, ct_visual, region_mask, item_image=work_image[items],
                    visual_kv=ct_visual_kv))                                                       # (n, D)
                continue
            seq = pt_states[p, :t]                                              # (n, t, D)
            if ph_pos.shape[1]:
                kids = work_children[items]                                     # (n, A)
                if len(table):
                    child_emb = table[kids.clamp_min(0)]                        # (n, A, D)
                else:  # no primitive in the batch: level 1 holds 0-ary concepts only, their slots all padding
                    child_emb = table.new_zeros((*kids.shape, table.shape[-1]))  # (n, A, D)
                modulated = self.modulator.bind(tuple(x[p] for x in ph_terms), child_emb)  # (n, A, D)
                slot = slots[p, :t]                                             # (n, t), -1 = not a placeholder
                at_slot = modulated.gather(1, slot.clamp_min(0)[..., None].expand(-1, -1, D))  # (n, t, D)
                seq = torch.where((slot >= 0)[..., None], at_slot, seq)        # (n, t, D)
            outputs.append(self.composition_transformer(
                seq, tmask[p, :t], ct_visual, region_mask, item_image=work_image[items]))  # (n, D)
        return torch.cat(outputs)                                               # (W, D)

    def _level_tokens(self, pt_states: torch.Tensor, ph_terms: tuple[torch.Tensor, ...] | None, table: torch.Tensor,
                      kids: torch.Tensor, p: torch.Tensor, slot: torch.Tensor, mask: torch.Tensor) -> PackedTokens:
        """One level's Composition Transformer input as packed real tokens, built without the padded rows.

        Each real token is either the PT's state of its template token or, at a placeholder, the modulated
        child; both are gathered in one index into ``[PT states; modulated children]``, and the modulator runs
        on the real (item, argument) pairs only (the padded path modulates every argument slot, (n, A)).
        The same tokens as :func:`pack_tokens` of the padded sequence; tested against it.

        Args:
            pt_states: (P', T, D) the PT's output for the composed items' templates (0 at padding).
            ph_terms: the modulator's placeholder terms, each (P', A, D) (:meth:`Modulator.placeholder_terms`;
                none for ``replace``); None when no template has a placeholder.
            table: (W_<lvl, D) embeddings of the work items below this level.
            kids: (n, A) each item's child work items in argument order; -1 padding.
            p: (n,) each item's template (row of ``pt_states``).
            slot: (n, t) argument index at each placeholder token, -1 elsewhere.
            mask: (n, t) bool, True = real token.

        Returns:
            :class:`PackedTokens` of the n items' real tokens.
        """
        P, T, D = pt_states.shape
        n, t = mask.shape
        source = pt_states.reshape(P * T, D)                                    # (P' * T, D)
        index = p[:, None] * T + torch.arange(t, device=p.device)[None, :]     # (n, t) rows of source
        is_slot = slot >= 0                                                     # (n, t)
        if ph_terms is not None and bool(is_slot.any()):
            real = kids >= 0                                                    # (n, A)
            item, arg = real.nonzero(as_tuple=True)                            # (M,) real (item, argument) pairs
            child = table[kids[item, arg]]                                      # (M, D)
            modulated = self.modulator.bind(tuple(x[p[item], arg] for x in ph_terms), child)  # (M, D)
            source = torch.cat([source, modulated])                             # (P' * T + M, D)
            pair_row = torch.cumsum(real.flatten(), 0).view(n, -1) - 1         # (n, A) row among the M pairs
            at_slot = P * T + pair_row.gather(1, slot.clamp_min(0))             # (n, t)
            index = torch.where(is_slot, at_slot, index)                        # (n, t)
        where = mask.flatten().nonzero()[:, 0]                                  # (N,)
        counts = mask.sum(1)                                                    # (n,)
        first = torch.cumsum(counts, 0) - counts                                # (n,)
        return PackedTokens(source.index_select(0, index.flatten().index_select(0, where)), where, mask, first)

    def _word_inputs(self, plan: ExecutionPlan, programs: ProgramBatch, prim: slice,
                     device: torch.device) -> _WordInputs:
        """The distinct primitive words of the level-0 work items ``prim``, as sub-word ids."""
        sub = plan.work_subtree[prim].to(device)
        words, inv = torch.unique(programs.subtree_primitive.to(device)[sub], return_inverse=True)  # (U',), (W0,)
        word_mask = programs.word_tokens.mask.to(device)[words]                       # (U', S)
        S = int(word_mask.sum(1).max())
        return _WordInputs(programs.word_tokens.ids.to(device)[words][:, :S], word_mask[:, :S], inv)

    def _embed_together(self, word_ids: torch.Tensor, template_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(U', S) word and (P', T) template ids through the PT's embeddings in one lookup: (U', S, D) word
        embeddings (as :meth:`PredicateTransformer.embed`) and (P', T, D_pt) template embeddings.

        Why: each lookup's backward fills a dense gradient of the whole (vocabulary, D) table (30,522 rows
        for a world batch's ~100 used ones); one lookup fills one. Rows and positions are what two lookups give.
        """
        (U, S), T = word_ids.shape, template_ids.shape[1]
        L = max(S, T)
        ids = torch.cat([F.pad(word_ids, (0, L - S)), F.pad(template_ids, (0, L - T))])   # (U' + P', L)
        pt = self.predicate_transformer
        emb = pt.embeddings(ids)                                                          # (U' + P', L, D_pt)
        words = emb[:U, :S]
        if pt.embedding_projection is not None:
            words = pt.embedding_projection(words)                                        # (U', S, D)
        return words, emb[U:, :T]

    def _primitives(self, plan: ExecutionPlan, prim: slice, words: _WordInputs, regions: torch.Tensor,
                    geometry: torch.Tensor, region_mask: torch.Tensor,
                    word_emb: torch.Tensor | None = None) -> torch.Tensor:
        """Embeddings of the level-0 work items ``prim``: (W0, D); ``word_emb`` the words' sub-word
        embeddings when already looked up (:meth:`_embed_together`)."""
        device = regions.device
        if word_emb is None:
            word_emb = self.predicate_transformer.embed(words.ids)             # (U', S, D)
        if not self.primitive_encoder.cross_attention:
            return self.primitive_encoder(word_emb, words.mask)[words.inverse]  # (W0, D)
        visual = self.primitive_encoder.embed_visual(regions, geometry)        # (I, R, D)
        img = plan.work_image[prim].to(device)
        return self.primitive_encoder(word_emb[words.inverse], words.mask[words.inverse], visual, region_mask,
                                      item_image=img)                          # (W0, D)


@dataclass
class _WordInputs:
    """The distinct primitive words of a plan's level 0."""

    ids: torch.Tensor      # (U', S) sub-word ids
    mask: torch.Tensor     # (U', S) bool, True = real sub-word
    inverse: torch.Tensor  # (W0,) each level-0 work item's word
