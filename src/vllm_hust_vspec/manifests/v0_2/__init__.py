"""The schema ``0.2-experimental`` manifest for Extension Managers that predate 0.3.

Data only. It is not the registered bundle (that is the 0.3 manifest one level up); operators
of an older manager read it with ``vllm-hust-vspec manifest show --schema 0.2-experimental``.
"""

MANIFEST_FILE = "vllm-hust-extension-v0.2.json"
