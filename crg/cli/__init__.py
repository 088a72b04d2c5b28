"""The graph commands: each parses its arguments and calls the library.

``gc-build-crg`` (:mod:`crg.cli.build_crg`) and ``gc-make-mcd-split`` (:mod:`crg.cli.make_mcd_split`);
``experiments/build_crg.py`` and ``experiments/make_mcd_split.py`` run the same programs. They read corpus
files; ``--data NAME`` needs the dataset catalog of a layer above ``crg``, which the console scripts pass to
``main(argv, resolve_dataset=...)``.
"""

__all__ = ["build_crg", "make_mcd_split"]
