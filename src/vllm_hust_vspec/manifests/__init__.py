"""Extension-Manager bundle for ``org.vllm-hust.vspec``: data only, no vSpec runtime code.

The ``vllm_hust.extension_bundles`` entry point names this package. The manager looks for
exactly one manifest file directly in this directory, so it holds only the schema-0.3
manifest (``vllm-hust-extension-v0.3.json``). The ``0.2-experimental`` manifest for older
managers lives in the ``v0_2`` sub-package and the JSON Schemas in ``schemas/``; neither is
in this directory, so discovery stays unambiguous. Keep this module free of imports.
"""

EXTENSION_ID = "org.vllm-hust.vspec"
MANIFEST_FILE = "vllm-hust-extension-v0.3.json"
