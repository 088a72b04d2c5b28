"""Concept & Relation Graph (CRG): constituency parses -> concepts, predicates, denotations.

Torch-free. The science is in pure functions over trees:

* :func:`crg.dep_to_constituency.dependency_to_constituency` -- spaCy dependency parse -> PTB tree;
* :func:`crg.extract.extract_concepts` -- Appendix A's concept/predicate extraction;
* :class:`crg.graph.ConceptGraph` -- the saved graph and its query API;
* :func:`crg.build.build_crg` -- corpus -> graph, with cached parses;
* :func:`crg.mcd_output.write_mcd_split` -- corpora -> an MCD split's folder (:mod:`crg.mcd`: the procedure);
* :mod:`crg.hard_negatives` -- CREPE's hard negatives from a caption's parse.
"""

import importlib

__all__ = [
    "BuildReport", "build_crg", "Corpus", "CorpusFormatError", "ImageRecord", "read_corpus", "write_jsonl",
    "ConceptNode", "Predicate", "extract_concepts", "ConceptGraph", "load_graph", "make_parser",
]

# Imported on first access (PEP 562): `import crg` costs nothing, `from crg import load_graph` only the graph
# module (numpy), and nltk comes where a tree is built (benchmarks/bench_import.py; docs/benchmarks.md).
_LAZY = {"BuildReport": "build", "build_crg": "build", "Corpus": "corpus", "CorpusFormatError": "corpus",
         "ImageRecord": "corpus", "read_corpus": "corpus", "write_jsonl": "corpus", "ConceptNode": "extract",
         "Predicate": "extract", "extract_concepts": "extract", "ConceptGraph": "graph", "load_graph": "graph",
         "make_parser": "parse"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
