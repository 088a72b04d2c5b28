"""Make hard negatives of a caption corpus and report the blind checks (the program is crg/cli/hard_negatives.py).

    python experiments/hard_negatives.py --captions ../shared/data/coco/captions.jsonl.gz --split test --num-captions 2000 --out runs/hn2k

``--help`` lists every option; the console script ``gc-hard-negatives`` is the same program.
"""

import sys

from crg.cli.hard_negatives import main

if __name__ == "__main__":
    sys.exit(main())
