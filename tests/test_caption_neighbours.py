"""ViLBERT's hard caption negatives: the nearest-neighbour pool against a naive reference, and the batches."""

import numpy as np
import pytest

from composer.training.caption_neighbours import hard_caption_pool, nearest_other_group, sentence_embeddings


def naive_nearest_other_group(emb: np.ndarray, groups: np.ndarray, k: int, same=None) -> np.ndarray:
    """Every row sorted in full by (-similarity, index), own group (and own label) removed, first k kept."""
    out = []
    for i in range(len(emb)):
        cand = [j for j in range(len(emb)) if groups[j] != groups[i] and (same is None or same[j] != same[i])]
        cand.sort(key=lambda j: (-float(emb[i] @ emb[j]), j))
        out.append(cand[:k])
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_nearest_other_group_matches_the_naive_reference(chunk):
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((53, 6)).astype(np.float32)
    emb[10] = emb[3]                              # exact ties: duplicate captions of different images
    emb[11] = emb[3]
    groups = rng.integers(0, 12, size=53)
    got = nearest_other_group(emb, groups, 9, chunk=chunk)
    want = naive_nearest_other_group(emb, groups, 9)
    np.testing.assert_array_equal(got, want)
    assert all(groups[j] != groups[i] for i, row in enumerate(got) for j in row)


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_rows_with_the_same_label_are_excluded_like_the_own_group(chunk):
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((41, 5)).astype(np.float32)
    groups = rng.integers(0, 9, size=41)
    same = rng.integers(0, 25, size=41)           # identical texts, some on the same image, some not
    emb[same == same[0]] = emb[0]                 # an identical text embeds identically: the nearest by far
    got = nearest_other_group(emb, groups, 6, same=same, chunk=chunk)
    np.testing.assert_array_equal(got, naive_nearest_other_group(emb, groups, 6, same=same))
    assert all(same[j] != same[i] and groups[j] != groups[i] for i, row in enumerate(got) for j in row)
    # k is clamped to the fewest candidates: row 0 excludes its group and its label (overlap counted once)
    groups2, same2 = np.array([0, 0, 1, 2, 3]), np.array([0, 1, 0, 2, 3])
    assert nearest_other_group(np.eye(5, dtype=np.float32), groups2, 100, same=same2).shape == (5, 2)


def test_the_pool_never_holds_the_captions_own_text(tmp_path, monkeypatch):
    monkeypatch.setenv("GC_CACHE_DIR", str(tmp_path))
    texts = ["a red cube.", "A red  cube.", "a blue cube.", "a red ball", "a green cone"]
    pool = hard_caption_pool(texts, np.array([0, 1, 2, 3, 4]), k=3)
    assert pool.shape == (5, 3) and 1 not in pool[0] and 0 not in pool[1]


def test_nearest_other_group_clamps_k_to_the_candidates_every_row_has():
    emb = np.eye(5, dtype=np.float32)
    groups = np.array([0, 0, 0, 1, 2])            # rows of group 0 have 2 candidates
    assert nearest_other_group(emb, groups, 100).shape == (5, 2)
    assert nearest_other_group(emb, np.zeros(5), 3).shape == (5, 0)
    with pytest.raises(ValueError, match="one entry per row"):
        nearest_other_group(emb, np.zeros(4), 3)


def test_sentence_embeddings_put_paraphrases_nearer_than_unrelated_captions():
    emb = sentence_embeddings(["a red cube left of a blue ball", "a red cube to the left of a blue sphere",
                               "two men play football on the beach"])
    assert emb.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.2


def test_the_pool_is_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("GC_CACHE_DIR", str(tmp_path))
    texts = ["a red cube", "a blue cube", "a red ball", "a green cone"]
    images = np.array([0, 0, 1, 2])
    pool = hard_caption_pool(texts, images, k=2)
    assert pool.shape == (4, 2) and len(list((tmp_path / "hard_negatives").glob("*.npy"))) == 1
    np.testing.assert_array_equal(hard_caption_pool(texts, images, k=2), pool)
    hard_caption_pool(texts, np.array([0, 1, 1, 2]), k=2)  # other images: another entry
    assert len(list((tmp_path / "hard_negatives").glob("*.npy"))) == 2


def test_batches_draw_hard_caption_negatives_from_the_pool(tiny_world, tmp_path, monkeypatch):
    from composer.models.composer.config import composer_config
    from composer.models.common.retrieval_module import OptimConfig
    from composer.models.composer.module import ComposerModule
    from composer.training.data import CompositionDataModule, DataConfig

    monkeypatch.setenv("GC_CACHE_DIR", str(tmp_path))
    data = DataConfig(data=str(tiny_world / "captions.jsonl"), features=str(tiny_world / "features.h5"),
                      batch_size=4, max_regions=12, eval_images=6, seed=3, hard_negative_captions=1,
                      hard_negative_pool=5)
    module = ComposerModule(composer_config("tiny", visual={"region_dim": 256}), OptimConfig(), seed=3)
    dm = CompositionDataModule(data, module.tokenizer)
    dm.setup()
    g = dm.graphs["train"]
    assert dm.hard_pool.shape == (g.num_captions, 5)
    positives = list(range(8))
    batch = dm.collate_train([(0, 0, c) for c in positives])
    captions = batch.programs.programs
    for row, c in enumerate(positives):
        assert captions[int(batch.pair_caption[row, 0])].texts[-1] == g.concept_texts[g.caption_root[c]]
        # column 1 random, column 2 hard: one of the positive's 5 nearest captions of other images
        hard_text = captions[int(batch.pair_caption[row, 2])].texts[-1]
        pool_texts = {g.concept_texts[g.caption_root[j]] for j in dm.hard_pool[c]}
        assert hard_text in pool_texts
        assert all(g.caption_image[j] != g.caption_image[c] for j in dm.hard_pool[c])
        assert (batch.pair_image[row, :3] == batch.pair_image[row, 0]).all()
    with pytest.raises(ValueError, match="hard_negative_captions"):
        DataConfig(negative_captions=1, hard_negative_captions=2)


def test_hard_negatives_are_refused_where_the_loss_would_ignore_them():
    from composer.training.recipes import RecipeOverrides, named_recipe

    assert named_recipe("flat", "world", RecipeOverrides(hard_negative_captions=1)).data.hard_negative_captions == 1
    for model in ("vse", "clip"):
        with pytest.raises(ValueError, match="positive pairs only"):
            named_recipe(model, "world", RecipeOverrides(hard_negative_captions=1))
