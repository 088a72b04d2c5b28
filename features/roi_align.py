"""RoIAlign (He et al. 2017) in plain torch, matching ``torchvision.ops.roi_align`` for a fixed sampling ratio.

torchvision does not work with the torch this project pins, so the extractor pools region features with
this. Every sample point is a bilinear read done by ``grid_sample``; the rules at the border are
torchvision's: a point more than one cell outside the map reads 0, a point within one cell is clamped to
the edge. ``tests/test_feature_extract.py`` checks it against a loop-by-loop transcription of
torchvision's kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["roi_align"]


def roi_align(features: torch.Tensor, rois: torch.Tensor, output_size: int | tuple[int, int],
              spatial_scale: float = 1.0, sampling_ratio: int = 2, aligned: bool = True) -> torch.Tensor:
    """Pool a fixed-size grid of bilinear samples from each region of interest.

    Args:
        features: ``(B, C, H, W)`` feature maps.
        rois: ``(K, 5)`` rows ``[batch_index, x1, y1, x2, y2]`` in input coordinates (multiplied by
            ``spatial_scale`` to reach feature-map cells).
        output_size: ``P`` or ``(P_h, P_w)`` bins per region.
        spatial_scale: feature-map cells per input unit (e.g. 1/32 for a stride-32 backbone).
        sampling_ratio: ``S``: bilinear samples per bin along each axis (``S x S`` per bin, averaged). Must be
            > 0 (torchvision's adaptive ``-1`` is not supported: it would give regions different sample counts).
        aligned: shift boxes by -0.5 cell so that pixel centres line up (Detectron2's default).

    Returns:
        ``(K, C, P_h, P_w)``.
    """
    if features.dim() != 4:
        raise ValueError(f"features must be (B, C, H, W), got shape {tuple(features.shape)}")
    if rois.dim() != 2 or rois.shape[1] != 5:
        raise ValueError(f"rois must be (K, 5) as [batch_index, x1, y1, x2, y2], got shape {tuple(rois.shape)}")
    if sampling_ratio <= 0:
        raise ValueError(f"sampling_ratio must be positive, got {sampling_ratio}")
    ph, pw = (output_size, output_size) if isinstance(output_size, int) else output_size
    B, C, H, W = features.shape
    K, S = rois.shape[0], sampling_ratio
    if K == 0:
        return features.new_zeros((0, C, ph, pw))
    rois = rois.to(features.dtype)
    offset = 0.5 if aligned else 0.0
    x1 = rois[:, 1] * spatial_scale - offset  # (K,)
    y1 = rois[:, 2] * spatial_scale - offset
    roi_w = rois[:, 3] * spatial_scale - offset - x1
    roi_h = rois[:, 4] * spatial_scale - offset - y1
    if not aligned:  # legacy behaviour: regions at least one cell wide
        roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
    # Sample k along an axis sits at (k + 0.5) / S bins from the region's start: bin k // S, sample k % S.
    frac_x = (torch.arange(pw * S, device=features.device, dtype=features.dtype) + 0.5) / S  # (pw*S,)
    frac_y = (torch.arange(ph * S, device=features.device, dtype=features.dtype) + 0.5) / S  # (ph*S,)
    xs = x1[:, None] + frac_x[None, :] * (roi_w / pw)[:, None]  # (K, pw*S)
    ys = y1[:, None] + frac_y[None, :] * (roi_h / ph)[:, None]  # (K, ph*S)
    valid = ((ys >= -1.0) & (ys <= H))[:, :, None] & ((xs >= -1.0) & (xs <= W))[:, None, :]  # (K, ph*S, pw*S)
    # grid_sample with align_corners=True maps -1..1 to cell centres 0..size-1; clamping first reproduces
    # torchvision's edge rule, so padding never matters.
    gx = xs.clamp(0, W - 1) * (2.0 / max(W - 1, 1)) - 1.0  # (K, pw*S)
    gy = ys.clamp(0, H - 1) * (2.0 / max(H - 1, 1)) - 1.0  # (K, ph*S)
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)  # (K, ph*S, pw*S, 2)
    samples = features.new_empty((K, C, ph * S, pw * S))
    batch_index = rois[:, 0].long()
    for b in batch_index.unique().tolist():
        sel = (batch_index == b).nonzero(as_tuple=True)[0]
        g = grid[sel].reshape(1, -1, pw * S, 2)  # (1, k*ph*S, pw*S, 2)
        s = F.grid_sample(features[b:b + 1], g, mode="bilinear", padding_mode="border", align_corners=True)
        samples[sel] = s.reshape(C, len(sel), ph * S, pw * S).transpose(0, 1)  # (k, C, ph*S, pw*S)
    samples = samples * valid[:, None].to(samples.dtype)
    return samples.reshape(K, C, ph, S, pw, S).mean(dim=(3, 5))  # (K, C, ph, pw)
