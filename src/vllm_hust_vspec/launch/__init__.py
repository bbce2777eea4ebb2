"""Turning settings into the ``vllm serve`` process: model lookup, capture sizes, argv/env."""
