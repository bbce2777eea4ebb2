"""The front-end process (API server / LLM): config creation and the engine-dead path."""
