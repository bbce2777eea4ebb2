"""Extension-Manager bundle for ``org.vllm-hust.vspec``: data only, no vSpec runtime code.

The ``vllm_hust.extension_bundles`` entry point names this package. Every vLLM-HUST Extension
Manager looks for exactly one manifest file directly in this directory, from a fixed list of
names; ``vllm-hust-extension-v0.2.json`` (schema ``0.2-experimental``) is the one name on
every manager's list and the one schema every manager's parser accepts, so it is the only
manifest here. The ``0.3-experimental`` manifest (with ``requires_extensions`` and
``resource_claims``) lives in the ``v0_3`` sub-package and the JSON Schemas in ``schemas/``;
neither is in this directory, so discovery stays unambiguous. Keep this module free of imports.
"""

EXTENSION_ID = "org.vllm-hust.vspec"
MANIFEST_FILE = "vllm-hust-extension-v0.2.json"
