"""The partitioned build on a two-node Ray cluster simulated on this machine (``ray.cluster_utils.Cluster``: two
raylets, one CPU each), joined by address as on a real cluster: actors spread over both nodes and every write
through a memory map synced (the cluster path); the graph is still the default engine's."""

from __future__ import annotations

import pytest

from conftest import ROOT
from crg.build import build_crg
from crg.corpus import read_corpus
from crg.graph_compare import graph_differences
from crg.ray_engine import ParserSpec, RayConfig
from crg.ray_scale import build_crg_partitioned
from test_crg_scale import comparable

TOY = ROOT / "crg" / "data" / "toy_captions.jsonl"


@pytest.fixture()
def two_nodes():
    ray = pytest.importorskip("ray", reason="the [distributed] extra (ray[data]) is not installed")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_partitioned_build_on_two_nodes_gives_the_default_graph(tmp_path, two_nodes, spacy_parser):
    import ray

    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    want, want_report = build_crg(read_corpus(TOY), spacy_parser, progress=False)
    build = build_crg_partitioned(TOY, ParserSpec("spacy"), tmp_path / "out",
                                  config=RayConfig(address=two_nodes.address, workers=2, shards=3), num_partitions=2,
                                  progress=False)
    assert build.engine.address == two_nodes.address and build.engine.workers == 2
    assert graph_differences(build.graph, want) == {}
    assert comparable(build.report) == comparable(want_report)
