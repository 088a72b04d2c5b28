"""The study: every model and the papers' ablations on the generated world, evaluated alike, with tables and
plots (the program is composer/cli/study.py; the orchestration composer/study/runner.py, each run
composer/study/execute.py).

    python experiments/run_study.py --data world --out runs/study_cpu --profile cpu

``--help`` lists every option; the console script ``gc-study`` is the same program.
"""

import sys

from composer.cli.study import main

if __name__ == "__main__":
    sys.exit(main())
