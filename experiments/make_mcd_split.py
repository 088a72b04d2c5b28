"""Make a maximum-compound-divergence (MCD) evaluation split (the program is crg/cli/make_mcd_split.py, with
--data NAME from features/cli/make_mcd_split.py; the work, crg.mcd_output.write_mcd_split).

    python experiments/make_mcd_split.py --train ../shared/data/flickr30k/captions.jsonl --train-split train \\
        --candidates ../shared/data/coco/captions.jsonl.gz --candidate-splits test,val --num-images 1000 --out runs/coco_mcd

``--help`` lists every option and the files written (see docs/mcd.md).
"""

import sys

from features.cli.make_mcd_split import main

if __name__ == "__main__":
    sys.exit(main())
