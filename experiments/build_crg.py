"""Build the Concept & Relation Graph of a caption corpus (the program is crg/cli/build_crg.py; --data NAME comes
from features/cli/build_crg.py, which hands it the dataset catalog).

    python experiments/build_crg.py --captions ../shared/data/flickr30k/captions.jsonl --split train --out runs/crg_f30k --dump

``--help`` lists every option; the console script ``gc-build-crg`` is the same program.
"""

import sys

from features.cli.build_crg import main

if __name__ == "__main__":
    sys.exit(main())
