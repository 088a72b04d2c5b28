"""COMPOSER: recursive, visually grounded concept composition (Zhang et al., 2021, §3).

The model parts (primitive encoder, Predicate Transformer, FiLM modulator, Composition Transformer),
the losses, the Lightning training and evaluation code, and the baselines; docs/composer.md explains
them.
"""
