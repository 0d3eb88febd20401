"""`python -m kyma_gpu`: the manager process (kyma_gpu/main.py)."""

import sys

from kyma_gpu.main import main

if __name__ == "__main__":
    sys.exit(main())
