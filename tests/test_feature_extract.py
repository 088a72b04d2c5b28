"""Extraction from raw images with tiny random transformers backbones, and RoIAlign against a naive reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from features.extract import ExtractConfig, extract, load_backbone
from features.extract import main as extract_main
from features.geometry import grid_boxes
from features.ingest import ConversionError
from features.roi_align import roi_align
from features.store import FeatureStore

# ---- RoIAlign ---------------------------------------------------------------------------------------------


def _bilinear(f, y, x):
    """torchvision's roi_align_kernel bilinear_interpolate, transcribed."""
    C, H, W = f.shape
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return torch.zeros(C, dtype=f.dtype)
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= H - 1:
        y_high = y_low = H - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= W - 1:
        x_high = x_low = W - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    return hy * hx * f[:, y_low, x_low] + hy * lx * f[:, y_low, x_high] + ly * hx * f[:, y_high, x_low] + \
        ly * lx * f[:, y_high, x_high]


def naive_roi_align(feat, rois, P, scale, S, aligned):
    K, C = rois.shape[0], feat.shape[1]
    out = torch.zeros(K, C, P, P, dtype=feat.dtype)
    off = 0.5 if aligned else 0.0
    for k in range(K):
        b = int(rois[k, 0])
        x1, y1, x2, y2 = (float(v) * scale - off for v in rois[k, 1:])
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bw, bh = rw / P, rh / P
        for py in range(P):
            for px in range(P):
                acc = torch.zeros(C, dtype=feat.dtype)
                for iy in range(S):
                    for ix in range(S):
                        y, x = y1 + py * bh + (iy + 0.5) * bh / S, x1 + px * bw + (ix + 0.5) * bw / S
                        acc += _bilinear(feat[b], y, x)
                out[k, :, py, px] = acc / (S * S)
    return out


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_roi_align_matches_naive_reference(aligned, scale):
    torch.manual_seed(0)
    feat = torch.randn(2, 3, 5, 7, dtype=torch.float64)
    rois = torch.tensor([[0, 0, 0, 7, 5], [1, 1.3, 0.2, 4.7, 3.9], [0, -2, -3, 3, 2], [1, 5, 3, 9, 8],
                         [0, 2, 2, 2.1, 2.05], [1, -10, -10, -5, -5]], dtype=torch.float64)
    got = roi_align(feat, rois, 3, scale, sampling_ratio=2, aligned=aligned)
    assert got.shape == (6, 3, 3, 3)
    torch.testing.assert_close(got, naive_roi_align(feat, rois, 3, scale, 2, aligned), rtol=1e-10, atol=1e-10)
    assert roi_align(feat, rois[:0], 2).shape == (0, 3, 2, 2)
    with pytest.raises(ValueError, match="sampling_ratio must be positive"):
        roi_align(feat, rois, 2, sampling_ratio=0)


# ---- tiny backbones and images ---------------------------------------------------------------------------------

SIZES = [(40, 30), (64, 64), (50, 80)]  # (width, height), all different


@pytest.fixture(scope="module")
def images_dir(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    (root / "sub").mkdir()
    rng = np.random.default_rng(0)
    for k, (w, h) in enumerate(SIZES):
        where = root / "sub" if k == 2 else root
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(where / f"{1000 + k}.png")
    return root


@pytest.fixture(scope="module")
def tiny_vit(tmp_path_factory):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("vit")
    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                       image_size=32, patch_size=8)).save_pretrained(path)
    (path / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "ViTImageProcessor", "do_resize": True, "size": {"height": 32, "width": 32},
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2}))
    return path


@pytest.fixture(scope="module")
def tiny_resnet(tmp_path_factory):
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("resnet")
    ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[16, 24], depths=[1, 1])).save_pretrained(path)
    return path  # no preprocessor config: ImageNet statistics, with a warning


def _pixels(path, backbone):
    from PIL import Image

    with Image.open(path) as im:
        arr = np.asarray(im.convert("RGB").resize((backbone.image_size,) * 2, resample=backbone.resample), np.float32)
    x = torch.from_numpy(arr).permute(2, 0, 1) / 255.0
    return ((x - torch.tensor(backbone.mean).view(3, 1, 1)) / torch.tensor(backbone.std).view(3, 1, 1))[None]


def test_grid_features_from_a_vit(images_dir, tiny_vit, tmp_path):
    out = tmp_path / "vit.h5"
    stats = extract(ExtractConfig(images_dir, str(tiny_vit), out, batch_size=2, num_workers=0), progress=False)
    assert stats.written == 3
    store = FeatureStore(out)
    assert sorted(store.image_ids) == ["1000", "1001", "1002"] and store.feature_dim == 32
    backbone = load_backbone(str(tiny_vit), torch.device("cpu"))
    assert backbone.image_size == 32 and backbone.mean == (0.5, 0.5, 0.5)
    for k, (w, h) in enumerate(SIZES):
        image_id = str(1000 + k)
        feats, boxes = store.read_raw(image_id)
        assert feats.shape == (16, 32) and store.image_size(image_id) == (w, h)  # 32 / 8 = 4 x 4 patches
        np.testing.assert_allclose(boxes, grid_boxes(4, 4, w, h))
        path = next(images_dir.rglob(f"{image_id}.png"))
        tokens = backbone.model(pixel_values=_pixels(path, backbone)).last_hidden_state[0, 1:]  # drop CLS
        np.testing.assert_allclose(feats.astype(np.float32), tokens.detach().numpy(), rtol=2e-3, atol=2e-3)
    r = store.read("1001", max_regions=16)
    assert r.geometry[1:, 4].sum() == pytest.approx(1.0)  # the grid tiles the image


def test_grid_features_from_a_cnn_and_resume(images_dir, tiny_resnet, tmp_path, caplog):
    out = tmp_path / "cnn.h5"
    cfg = ExtractConfig(images_dir, str(tiny_resnet), out, batch_size=3, num_workers=0, image_size=64)
    extract(cfg, progress=False)
    assert "no preprocessor_config.json" in caplog.text
    store = FeatureStore(out)
    # stride-4 stem, stride-1 first stage, stride-2 second stage: 64 / 8 = 8 x 8 cells
    assert store.feature_dim == 24 and store.max_regions == 8 * 8
    np.testing.assert_allclose(store.read_raw("1002")[1], grid_boxes(8, 8, *SIZES[2]))
    store.close()
    again = extract(cfg, progress=False)
    assert (again.written, again.skipped_existing) == (0, 3)


def test_box_features_are_roi_aligned(images_dir, tiny_vit, tmp_path):
    boxes = {"1000": [[0, 0, 40, 30], [5, 5, 20, 25]], "1001": [[10, 10, 60, 30]]}  # 1002 has none: skipped
    box_file = tmp_path / "boxes.json"
    box_file.write_text(json.dumps(boxes))
    out = tmp_path / "roi.h5"
    stats = extract(ExtractConfig(images_dir, str(tiny_vit), out, boxes=box_file, num_workers=0, pool=3),
                    progress=False)
    assert stats.written == 2
    store = FeatureStore(out)
    backbone = load_backbone(str(tiny_vit), torch.device("cpu"))
    for image_id, bxs in boxes.items():
        feats, got = store.read_raw(image_id)
        np.testing.assert_array_equal(got, np.asarray(bxs, np.float32))
        w, h = store.image_size(image_id)
        fmap = backbone.feature_map(_pixels(next(images_dir.rglob(f"{image_id}.png")), backbone))  # (1, 32, 4, 4)
        cells = torch.tensor(bxs, dtype=torch.float32) * torch.tensor([4 / w, 4 / h, 4 / w, 4 / h])
        rois = torch.cat([torch.zeros(len(bxs), 1), cells], 1)
        want = roi_align(fmap, rois, 3, 1.0, 2, aligned=True).mean((2, 3))
        np.testing.assert_allclose(feats.astype(np.float32), want.numpy(), rtol=2e-3, atol=2e-3)


def test_unreadable_images_and_cli(images_dir, tiny_vit, tmp_path, capsys):
    broken = tmp_path / "imgs"
    broken.mkdir()
    (broken / "2000.jpg").write_bytes(b"not a jpeg")
    for p in images_dir.glob("*.png"):
        (broken / p.name).write_bytes(p.read_bytes())
    out = tmp_path / "s.h5"
    with pytest.raises(ConversionError, match=r"2000\.jpg: cannot read image .*--skip-bad"):
        extract(ExtractConfig(broken, str(tiny_vit), out, num_workers=0), progress=False)
    args = ["--images", str(broken), "--model", str(tiny_vit), "--out", str(out), "--num-workers", "0",
            "--no-progress"]
    assert extract_main(args) == 2 and "cannot read image" in capsys.readouterr().err
    assert extract_main(args + ["--skip-bad"]) == 0
    assert "1 broken records skipped" in capsys.readouterr().out
    assert sorted(FeatureStore(out).image_ids) == ["1000", "1001"]
    assert extract_main(["--images", str(tmp_path / "none"), "--model", str(tiny_vit), "--out", str(out)]) == 2
