"""The launcher's graph mode names; the capture sizes are settings/capture.py."""

from __future__ import annotations

# --graph-mode -> vLLM's cudagraph_mode, with the predecessor's spellings: ``full`` is combined
# FULL (one FULL graph per size for every batch), ``full-and-piecewise`` FULL decode graphs with
# mixed batches piecewise.
CUDAGRAPH_MODE = {
    "piecewise": "PIECEWISE",
    "full-decode-only": "FULL_DECODE_ONLY",
    "full-and-piecewise": "FULL_AND_PIECEWISE",
    "full": "FULL",
}
