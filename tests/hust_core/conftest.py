"""tests/hust_core: the inner tests run only in the overlay interpreter (VSPEC_HUST_CORE=1)."""

import os

collect_ignore = [] if os.environ.get("VSPEC_HUST_CORE") == "1" else ["inner_engine.py"]
