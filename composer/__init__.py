"""COMPOSER: recursive, visually grounded concept composition (Zhang et al., 2021, §3).

This package will hold the model parts (primitive encoder, Predicate Transformer, FiLM modulator,
Composition Transformer), the losses and the Lightning training and evaluation code; see
docs/roadmap.md for what has landed.
"""
