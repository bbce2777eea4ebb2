"""The schema ``0.3-experimental`` manifest: the discovered one plus ``requires_extensions``
and ``resource_claims``.

Data only. It is not the discovered bundle (that is the 0.2-experimental manifest one level
up); point a manager that parses 0.3-experimental at it explicitly, e.g. with the path from
``vllm-hust-vspec manifest show --schema 0.3-experimental --format path``.
"""

MANIFEST_FILE = "vllm-hust-extension-v0.3.json"
