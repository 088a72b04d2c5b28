"""CLIP, codebook-CLIP and IL-CLIP: sparsemax, the codebook, the IL schedule, spawning, distillation,
training steps, scoring paths and an exact resume across a spawn (tiny configs, synthetic batches)."""

import math

import lightning as L
import numpy as np
import pytest
import torch

from composer.models.clip.model import ClipModel, agent_generator, clip_config
from composer.models.clip.module import ClipModule
from composer.models.clip.codebook import Codebook, sparsemax
from composer.training.data import TrainBatch
from composer.models.clip.iterated_learning import ILConfig, clip_contrastive_loss, il_config, spawn, swap_two_words
from composer.models.common.retrieval_module import OptimConfig
from composer.models.composer.program import ConceptProgram, ProgramBatch
from composer.models.common.retrieval import score_matrix
from kill_switch import Killed, KillAt

CAPTIONS = [("a red cube left of a blue ball", ["cube", "ball"]), ("two green rings", ["rings"]),
            ("a small yellow cone", ["cone"]), ("there is a metal box near a cube", ["box", "cube"]),
            ("a big ball", ["ball"]), ("a cone", ["cone"])]


def program(sentence: str, words: list[str]) -> ConceptProgram:
    template = " ".join("[NN]" if w in words else w for w in sentence.split())
    return ConceptProgram.from_derivations([(sentence, template, [w for w in sentence.split() if w in words])])


def tiny_il(**kw) -> ILConfig:
    base = {"t_warm": 2, "t_distill": 3, "t_interact": 2, "generations": 2, "t_extend": 1, "lr_warmup_steps": 1,
            "lr": 2e-3}
    return il_config("paper", **{**base, **kw})


def make_module(kind="il_clip", **il) -> ClipModule:
    return ClipModule(kind, clip_config("tiny"), tiny_il(**il), OptimConfig(), seed=3)


@pytest.fixture(scope="module")
def module():
    return make_module()


def make_batch(tokenizer, seed: int = 0) -> TrainBatch:
    """6 images (R = 7, some padded regions), 6 captions, B = 4 positives (two show the same image)."""
    g = torch.Generator().manual_seed(seed)
    regions, geometry = torch.randn(6, 7, 11, generator=g), torch.rand(6, 7, 5, generator=g)
    mask = torch.ones(6, 7, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 2:] = False
    programs = ProgramBatch.collate([program(s, w) for s, w in CAPTIONS], tokenizer)
    pair_image = torch.tensor([[0, 0, 4], [1, 1, 5], [2, 2, 0], [2, 2, 1]])
    pair_caption = torch.tensor([[0, 4, 0], [1, 5, 1], [2, 0, 2], [3, 1, 3]])
    return TrainBatch(regions, geometry, mask, programs, pair_image, pair_caption, 1)


# ---------------------------------------------------------------------- sparsemax
def _simplex_projection_by_bisection(z: torch.Tensor) -> torch.Tensor:
    """The definition: p = max(z - tau, 0) with tau solving sum p = 1, found by bisection per row."""
    lo, hi = z.min(-1, keepdim=True).values - 1, z.max(-1, keepdim=True).values
    for _ in range(100):
        tau = (lo + hi) / 2
        over = torch.clamp(z - tau, min=0).sum(-1, keepdim=True) > 1
        lo, hi = torch.where(over, tau, lo), torch.where(over, hi, tau)
    return torch.clamp(z - (lo + hi) / 2, min=0)


def test_sparsemax_is_the_projection_onto_the_simplex():
    z = torch.randn(13, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2
    p = sparsemax(z)
    assert torch.allclose(p, _simplex_projection_by_bisection(z), atol=1e-9)
    assert torch.allclose(p.sum(-1), torch.ones(13, dtype=torch.float64)) and (p >= 0).all()
    assert (p == 0).any(-1).all()                                  # sparse: every row leaves codes out
    # closest point of the simplex: no random simplex point is nearer to z
    q = torch.distributions.Dirichlet(torch.ones(9, dtype=torch.float64)).sample((500,))  # (500, 9)
    assert ((q[None] - z[:, None]).norm(dim=-1) >= (p - z).norm(dim=-1)[:, None] - 1e-12).all()
    # the same ordering as softmax; a shift changes nothing; dim works on any axis
    assert torch.equal(p.argmax(-1), torch.softmax(z, -1).argmax(-1))
    i, j = torch.meshgrid(torch.arange(9), torch.arange(9), indexing="ij")
    bigger = z[:, i] > z[:, j]                                     # (13, 9, 9)
    assert (p[:, i] >= p[:, j])[bigger].all()
    assert torch.allclose(sparsemax(z + 5.0), p) and torch.allclose(sparsemax(z.T, dim=0), p.T)
    assert torch.equal(sparsemax(torch.tensor([10.0, 0.0, -1.0])), torch.tensor([1.0, 0.0, 0.0]))


def test_sparsemax_gradient_is_its_jacobian():
    z = torch.tensor([0.9, 0.6, 0.4, -2.0], dtype=torch.float64, requires_grad=True)
    p = sparsemax(z)
    support = (p > 0).double()
    expected = torch.diag(support) - support[:, None] * support[None, :] / support.sum()  # Martins & Astudillo
    jac = torch.autograd.functional.jacobian(sparsemax, z.detach())
    assert torch.allclose(jac, expected)


# ---------------------------------------------------------------------- codebook
def test_codebook_scores_are_max_cosine_over_real_tokens():
    torch.manual_seed(0)
    cb = Codebook(17, 6)
    tokens = torch.randn(3, 5, 6, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 0, 1, 0]], dtype=torch.bool)
    out = cb(tokens, mask)
    assert out.scores.shape == (3, 17) and out.weights.shape == (3, 17) and out.embedding.shape == (3, 6)
    for n in range(3):
        for c in range(17):
            best = max(float(torch.cosine_similarity(tokens[n, t].detach(), cb.codes[c].detach(), dim=0))
                       for t in range(5) if mask[n, t])
            assert math.isclose(float(out.scores[n, c]), best, rel_tol=1e-5, abs_tol=1e-6)
    assert torch.allclose(out.weights, sparsemax(out.scores)) and torch.allclose(out.embedding, out.weights @ cb.codes)
    padded = tokens.detach().clone()
    padded[1, 2:] = 100.0                                            # padding never wins the max
    assert torch.allclose(cb(padded, mask).scores, out.scores.detach())
    cb(tokens, mask, frozen=True).embedding.sum().backward()
    assert cb.codes.grad is None and tokens.grad is not None         # frozen: the agent learns, the codes do not
    with pytest.raises(ValueError, match="real token"):
        cb(tokens, torch.zeros(3, 5, dtype=torch.bool))


# ---------------------------------------------------------------------- schedule
def test_phase_schedule_step_by_step():
    cfg = il_config("paper", t_warm=3, t_distill=2, t_interact=3, generations=2, t_extend=4, lr_warmup_steps=2,
                    lr=1.0)
    assert cfg.total_steps == 3 + 2 * 5 + 4
    expected = ([(0, "warmup", s) for s in range(3)] + [(1, "distill", s) for s in range(2)]
                + [(1, "interact", s) for s in range(3)] + [(2, "distill", s) for s in range(2)]
                + [(2, "interact", s) for s in range(3 + 4)])        # the last generation is extended
    assert [tuple(cfg.phase_at(s)) for s in range(cfg.total_steps)] == expected
    assert tuple(cfg.phase_at(30)) == (2, "interact", 20)
    assert [s for s in range(cfg.total_steps) if cfg.is_spawn_step(s)] == [3, 8]
    # linear warm-up restarts at each generation, on one global cosine
    cosine = [0.5 * (1 + math.cos(math.pi * s / cfg.total_steps)) for s in range(cfg.total_steps)]
    warm = [min(1.0, (s - start + 1) / 2) for s, start in
            zip(range(cfg.total_steps), [0] * 3 + [3] * 5 + [8] * 9)]
    assert [cfg.lr_at(s) for s in range(cfg.total_steps)] == pytest.approx([c * w for c, w in zip(cosine, warm)])
    assert cfg.lr_at(3) < cfg.lr_at(2) and cfg.lr_at(8) < cfg.lr_at(7)
    plain = [cfg.lr_at(s, restarts=False) for s in range(1, cfg.total_steps)]
    assert plain == sorted(plain, reverse=True)                       # no restarts for plain CLIP
    assert [il_config("paper", spawn="alternate").spawn_target(g) for g in (1, 2, 3)] == \
        ["language", "vision", "language"]
    with pytest.raises(ValueError, match="spawn"):
        il_config("paper", spawn="both")


# ---------------------------------------------------------------------- spawn and distillation
@pytest.mark.parametrize("which", ["language", "vision"])
def test_spawn_resets_only_the_chosen_agent(which):
    model = ClipModel(clip_config("tiny"), use_codebook=True, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    teacher = spawn(model, which, agent_generator(0, 101))
    after = model.state_dict()
    prefix = f"{which}."
    for k, v in after.items():
        if k.startswith(prefix) and v.dim() >= 2:
            assert not torch.equal(v, before[k]), k                  # new random weights
        elif not k.startswith(prefix):
            assert torch.equal(v, before[k]), k                      # the other agent, codes and t untouched
    assert all(torch.equal(v, before[prefix + k]) for k, v in teacher.state_dict().items())
    assert not any(p.requires_grad for p in teacher.parameters())
    again = ClipModel(clip_config("tiny"), use_codebook=True, seed=0)
    spawn(again, which, agent_generator(0, 101))
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in after.items())  # seeded: reproducible


def _run(module, batch, steps, opt):
    losses = []
    for step in steps:
        phase = module.phase_at(step)
        if module.il.is_spawn_step(step):
            module.spawn_generation(phase.generation, opt)
        loss = module.step_loss(batch, phase, step)
        opt.zero_grad(set_to_none=True)
        loss.total.backward()
        opt.step()
        losses.append((phase.phase, float(loss.distill), float(loss.total)))
    return losses


@pytest.mark.parametrize("freeze", [True, False])
def test_codebook_is_unchanged_during_frozen_distillation_and_the_loss_falls(freeze):
    module = make_module(freeze_codebook=freeze, t_distill=8)
    batch = make_batch(module.tokenizer)
    opt = module.make_optimizer()
    _run(module, batch, range(2), opt)                                # warm-up: codes get momentum
    codes, vision = module.model.codebook.codes.detach().clone(), module.model.vision.state_dict()
    vision = {k: v.clone() for k, v in vision.items()}
    language = {k: v.clone() for k, v in module.model.language.state_dict().items()}
    log = _run(module, batch, range(2, 10), opt)                      # spawn + 8 distillation steps
    assert [p for p, _, _ in log] == ["distill"] * 8
    assert torch.equal(module.model.codebook.codes, codes) == freeze
    assert all(torch.equal(v, vision[k]) for k, v in module.model.vision.state_dict().items())
    assert not torch.equal(module.model.language.proj, language["proj"])
    distill = [d for _, d, _ in log]
    assert distill[-1] < 0.5 * distill[0], distill


def test_training_steps_give_finite_losses_and_gradients(module):
    batch = make_batch(module.tokenizer)
    for kind, il in [("clip", {}), ("codebook_clip", {}), ("il_clip", {"text_hard_negatives": True}),
                     ("il_clip", {"use_codebook": False, "spawn": "vision", "distill_contrastive_weight": 0.5})]:
        m = make_module(kind, **il)
        for step in (0, 2):                                           # warm-up, then (il_clip) distillation
            phase = m.phase_at(step)
            if m.iterated and m.il.is_spawn_step(step):
                m.spawn_generation(phase.generation)
            m.zero_grad(set_to_none=True)
            loss = m.step_loss(batch, phase, step)
            loss.total.backward()
            grads = [p.grad for p in m.parameters() if p.grad is not None]
            assert torch.isfinite(loss.total) and grads and all(torch.isfinite(g).all() for g in grads), (kind, il)
            assert any(g.abs().sum() > 0 for g in grads)
        assert (m.model.codebook is not None) == (kind != "clip" and il.get("use_codebook", True))


def test_contrastive_loss_masks_the_same_image_and_takes_hard_negatives():
    g = torch.Generator().manual_seed(1)
    img, txt, hard = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
    scale = torch.tensor(3.0)
    out = clip_contrastive_loss(img, txt, scale)
    logits = scale * torch.nn.functional.normalize(img, dim=-1) @ torch.nn.functional.normalize(txt, dim=-1).T
    naive = 0.5 * (torch.nn.functional.cross_entropy(logits, torch.arange(4))
                   + torch.nn.functional.cross_entropy(logits.T, torch.arange(4)))
    assert torch.allclose(out.loss, naive)
    same = torch.eye(4, dtype=torch.bool)
    same[2, 3] = same[3, 2] = True                                    # pairs 2 and 3 show one image
    img_dup = img.clone()
    img_dup[3] = img[2]
    masked = clip_contrastive_loss(img_dup, txt, scale, same_image=same)
    assert masked.loss < clip_contrastive_loss(img_dup, txt, scale).loss
    with_hard = clip_contrastive_loss(img, txt, scale, hard_text=hard, hard_valid=torch.tensor([1, 1, 0, 1]).bool())
    only_valid = clip_contrastive_loss(img, txt, scale, hard_text=hard[[0, 1, 3]])
    assert with_hard.loss > out.loss and torch.allclose(with_hard.loss, only_valid.loss)


def test_swap_two_words_prefers_primitives():
    rng = np.random.default_rng(0)
    assert swap_two_words("A red Cube left of a blue ball.", ["cube", "ball"], rng) == "A red ball left of a blue Cube."
    out = swap_two_words("two green rings", ["rings"], rng)           # one primitive: any two words
    assert out != "two green rings" and sorted(out.split()) == sorted(["two", "green", "rings"])
    assert swap_two_words("cube", ["cube"], rng) is None


# ---------------------------------------------------------------------- scoring paths
def test_score_pairs_agrees_with_encoded_cross_scoring(module):
    batch = make_batch(module.tokenizer)
    model = module.model.eval()
    programs = batch.programs.programs
    sentences = [p.texts[p.root] for p in programs]
    full = model.cross_scores(batch.regions, batch.geometry, batch.region_mask, sentences, chunk=4)  # (C, I)
    pairwise = score_matrix(model, batch.regions, batch.geometry, batch.region_mask, programs, module.tokenizer,
                            max_pairs=10).scores                     # chunks of images and captions
    assert full.shape == (6, 6)
    assert np.allclose(full.detach().numpy(), pairwise, atol=1e-5)
    model.train()


def test_easy_to_learn_probe_learns_and_leaves_the_module_alone(module):
    batch = make_batch(module.tokenizer)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    curve = module.easy_to_learn_probe([batch] * 12, steps=10, lr=1e-2)
    assert len(curve.accuracy) == 10 and all(0 <= a <= 1 for a in curve.accuracy)
    assert curve.loss[-1] < curve.loss[0]
    assert curve.loss == module.easy_to_learn_probe([batch] * 12, steps=10, lr=1e-2).loss  # same new agent
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())


# ---------------------------------------------------------------------- Lightning: exact resume mid-distillation
class _Batches(torch.utils.data.Dataset):
    def __init__(self, batches):
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        return self.batches[i]


def _fit(module, batches, root, *, ckpt_path=None, callbacks=()):
    loader = torch.utils.data.DataLoader(_Batches(batches), batch_size=None, shuffle=False)
    trainer = L.Trainer(default_root_dir=root, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, max_steps=module.il.total_steps, limit_val_batches=0,
                        num_sanity_val_steps=0, callbacks=list(callbacks), enable_checkpointing=bool(callbacks))
    trainer.fit(module, train_dataloaders=loader, ckpt_path=ckpt_path)
    return trainer


def test_resume_in_the_middle_of_distillation_is_exact(tmp_path):
    tok = make_module("clip").tokenizer
    batches = [make_batch(tok, seed=0)]                               # one batch per epoch: resumable loader
    full = make_module(text_hard_negatives=True)
    _fit(full, batches, tmp_path / "full")
    reference = {k: v.clone() for k, v in full.state_dict().items()}

    kill_at = 4                                                       # generation 1: distill steps 2, 3, 4
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=kill_at, save_last=True)
    first = make_module(text_hard_negatives=True)
    with pytest.raises(Killed):
        _fit(first, batches, tmp_path / "run", callbacks=[ckpt, KillAt(kill_at)])
    assert "il_teacher" in torch.load(tmp_path / "ck" / "last.ckpt", weights_only=True)

    torch.manual_seed(123)
    second = make_module(text_hard_negatives=True)
    _fit(second, batches, tmp_path / "run", ckpt_path=str(tmp_path / "ck" / "last.ckpt"))
    for k, v in second.state_dict().items():
        assert torch.equal(v, reference[k]), k
