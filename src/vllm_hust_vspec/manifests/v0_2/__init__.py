"""The schema ``0.2-experimental`` form of vSpec's manifest: the discovered one without
``requires_extensions`` and ``resource_claims``.

Data only, and not discovered (the bundle is the ``0.3-experimental`` manifest one level up).
It is what a reader that takes only ``0.2-experimental`` gets from
``vllm-hust-vspec manifest show --schema 0.2-experimental``; ``manifest validate`` checks
that it equals the discovered manifest minus the 0.3 fields.
"""

MANIFEST_FILE = "vllm-hust-extension-v0.2.json"
