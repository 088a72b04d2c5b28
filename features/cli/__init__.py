"""The graph commands with named datasets: ``gc-build-crg`` and ``gc-make-mcd-split``.

Why here: the programs are :mod:`crg.cli.build_crg` and :mod:`crg.cli.make_mcd_split`, but ``--data NAME``
needs the dataset catalog (:mod:`features.catalog`, which generates the world), and ``crg`` never imports the
layer above it. These modules sit above both and hand the catalog to the programs.
"""
