"""``python -m vllm_hust_vspec ...``: the launcher (``vllm-hust-vspec``), as 0.14's run.sh
called it."""

import sys

from vllm_hust_vspec.cli.launch import main

sys.exit(main())
