"""Extension-Manager bundle for ``org.vllm-hust.vspec``: data only, no vSpec runtime code.

The ``vllm_hust.extension_bundles`` entry point names this package. An Extension Manager looks
for exactly one manifest file directly in this directory, from a fixed list of names.
``vllm-hust-extension-v0.2.json`` is the one name on the list of every manager that knows
resource claims, so it is the only manifest here; it holds schema ``0.3-experimental`` (the
0.3 spelling those managers' parsers accept) with vSpec's ``resource_claims``. Managers choose
the parser by ``schema_version``, not by file name. The claim-less ``0.2-experimental`` form
lives in the ``v0_2`` sub-package and the JSON Schemas in ``schemas/``; neither is in this
directory, so discovery stays unambiguous. Keep this module free of imports.
"""

EXTENSION_ID = "org.vllm-hust.vspec"
MANIFEST_FILE = "vllm-hust-extension-v0.2.json"
