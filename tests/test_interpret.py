"""Figure 5: the composition tree with per-concept scores, its text and figure renderings, checkpoint
loading, and the interpret / evaluate scripts end to end on a tiny world."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from composer.training.checkpoint import load_composer
from composer.models.composer.config import composer_config
from composer.evaluation.interpretation import CompositionTree, TreeNode, interpret_pair, render_figure, render_text
from composer.models.composer.model import Composer
from composer.models.composer.program import ConceptProgram, ProgramBatch

ROOT = Path(__file__).resolve().parents[1]


def program() -> ConceptProgram:
    return ConceptProgram.from_derivations([
        ("a red ball", "a red [NN]", ["ball"]), ("a cube", "a [NN]", ["cube"]),
        ("a red ball is left of a cube", "[NP] is left of [NP]", ["a red ball", "a cube"])])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Composer(composer_config("tiny"), load_pretrained=False).eval()


def images(m: int):
    torch.manual_seed(1)
    return torch.randn(m, 5, 11), torch.rand(m, 5, 5), torch.ones(m, 5, dtype=torch.bool)


def test_tree_holds_the_models_score_of_every_concept(model):
    prog, tok = program(), model.make_tokenizer()
    regions, geometry, mask = images(2)
    model.train()
    tree = interpret_pair(model, regions, geometry, mask, prog, tok, image_labels=("gt", "neg"))
    assert model.training  # the mode is restored
    model.eval()
    batch = ProgramBatch.collate([prog], tok)
    pair_image, pair_caption = torch.arange(2), torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        out = model(regions, geometry, mask, batch, pair_image, pair_caption)
        root_scores = model.score_pairs(regions, geometry, mask, batch, pair_image, pair_caption)
    assert [n.text for n in tree.nodes] == list(prog.texts) and tree.root == prog.root
    for n in tree.nodes:
        assert n.children == prog.children[n.index] and n.level == prog.levels[n.index]
        np.testing.assert_allclose(n.scores, out.node_scores[:, n.index].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tree.nodes[tree.root].scores, root_scores.numpy(), rtol=1e-5, atol=1e-6)
    assert json.loads(json.dumps(tree.to_dict()))["image_labels"] == ["gt", "neg"]
    with pytest.raises(ValueError, match="labels"):
        interpret_pair(model, regions, geometry, mask, prog, tok, image_labels=("gt",))


def hand_tree() -> CompositionTree:
    prog = program()
    scores = {"ball": (0.5, 0.4), "cube": (-0.2, 0.3), "a red ball": (1.0, 0.9), "a cube": (0.1, -0.6),
              "a red ball is left of a cube": (2.0, -1.5)}
    return CompositionTree(tuple(TreeNode(i, t, prog.templates[i], prog.children[i], prog.levels[i], scores[t])
                                 for i, t in enumerate(prog.texts)), prog.root, ("gt", "neg"))


def test_text_rendering_indents_children_under_parents():
    lines = render_text(hand_tree()).splitlines()
    assert lines[0] == "scores [gt, neg]"
    depth = {line.strip().split("]  ", 1)[1].split("    =")[0]: (len(line) - len(line.lstrip())) // 2
             for line in lines[1:]}
    assert depth == {"a red ball is left of a cube": 0, "a red ball": 1, "ball": 2, "a cube": 1, "cube": 2}
    assert "[+2.000, -1.500]  a red ball is left of a cube    = [NP] is left of [NP]" in lines
    # children in placeholder order
    assert lines.index("  [+1.000, +0.900]  a red ball    = a red [NN]") < \
        lines.index("  [+0.100, -0.600]  a cube    = a [NN]")


def test_figure_is_written_with_and_without_pictures(tmp_path):
    tree = hand_tree()
    bare = render_figure(tree, tmp_path / "bare.png")
    picture = np.zeros((30, 40, 3), dtype=np.uint8)
    picture[:, :20] = 255
    Image.fromarray(picture).save(tmp_path / "pic.png")
    both = render_figure(tree, tmp_path / "sub" / "both.png", [tmp_path / "pic.png", picture], title="a caption")
    with Image.open(bare) as a, Image.open(both) as b:
        assert a.format == b.format == "PNG"
        assert b.size[0] > a.size[0]  # the pictures sit to the left of the tree
    with pytest.raises(ValueError, match="color_by"):
        render_figure(tree, tmp_path / "x.png", color_by=2)
    with pytest.raises(ValueError, match="pictures"):
        render_figure(tree, tmp_path / "x.png", [picture] * 3)


def test_checkpoint_loading_is_checked(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_composer"):
        load_composer(tmp_path / "nothing.ckpt")
    with pytest.raises(FileNotFoundError, match="last.ckpt"):
        load_composer(tmp_path)
    torch.save({"state_dict": {}, "hyper_parameters": {"optim": {}}}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="not a ComposerModule checkpoint"):
        load_composer(tmp_path / "other.ckpt")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"_script_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scripts_end_to_end_on_a_tiny_world(tmp_path, capsys):
    import lightning as L

    from composer.models.common.retrieval_module import OptimConfig

    from composer.models.composer.module import ComposerModule
    from features.world.generate import GenerateConfig, generate_world

    world = tmp_path / "world"
    generate_world(world, GenerateConfig(num_images=30, seed=2, render=0, workers=1), progress=False)
    module = ComposerModule(composer_config("tiny", visual={"region_dim": 256}), OptimConfig(lr=1e-3, epochs=1),
                            load_pretrained=False)
    # a real Lightning checkpoint (loops, callbacks, RNG states, ...) of the untrained module, without a fit
    trainer = L.Trainer(default_root_dir=tmp_path, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False)
    trainer.strategy.connect(module)
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(ckpt)

    loaded = load_composer(tmp_path / "run")  # a run directory: finds checkpoints/last.ckpt, weights_only
    for k, v in module.model.state_dict().items():
        assert torch.equal(v, loaded.model.state_dict()[k]), k

    common = ["--checkpoint", str(ckpt), "--data", str(world / "captions.jsonl"), "--features",
              str(world / "features.h5"), "--world-dir", str(world), "--max-regions", "6", "--quiet"]
    out = tmp_path / "eval.json"
    assert _script("evaluate_composer").main([*common, "--out", str(out), "--save-scores", str(tmp_path / "s")]) == 0
    res = json.loads(out.read_text())
    assert set(res["sentence"]) >= {"R@1", "R@5", "R@10"} and res["num_captions"] == 5 * res["num_images"]
    assert res["phrase"]["num_queries"] > 0 and "multi" in res["phrase"] and res["phrase"]["crg_outside_truth"] == 0
    scores = np.load(tmp_path / "s" / "scores.npy")
    assert scores.shape == (res["num_captions"], res["num_images"])
    # rerank with the model's own scores as the first stage: the final ranking is the full one
    _script("evaluate_composer").main([*common, "--out", str(out), "--no-phrases", "--first-stage-scores",
                                       str(tmp_path / "s" / "scores.npy"), "--rerank-k", "2"])
    rr = json.loads(out.read_text())
    assert rr["rerank"]["first_stage"] == {k: rr["sentence"][k] for k in ("R@1", "R@5", "R@10")}
    assert rr["rerank"]["pairs_scored"] == 2 * res["num_captions"]
    order = json.loads((tmp_path / "s" / "order.json").read_text())
    from composer.models.common.retrieval import recall_at_k
    assert rr["rerank"]["shortlist_recall"] == recall_at_k(scores, np.array(order["row_image"]), ks=(2,))["R@2"]

    capsys.readouterr()
    png = tmp_path / "fig.png"
    code = _script("interpret").main([*common, "--index", "1", "--out", str(png), "--json", str(tmp_path / "t.json")])
    assert code == 0
    printed = capsys.readouterr().out
    tree = json.loads((tmp_path / "t.json").read_text())
    assert tree["caption_true_of"][tree["image"]] is True and len(tree["tree"]["image_labels"]) == 2
    assert tree["tree"]["nodes"][-1]["text"] in printed and png.exists()
    with pytest.raises(SystemExit, match="does not exist"):
        _script("interpret").main([*common[:1], str(tmp_path / "missing.ckpt"), *common[2:], "--index", "0"])
