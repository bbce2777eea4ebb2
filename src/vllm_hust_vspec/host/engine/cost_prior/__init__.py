"""Where a cold controller's step-cost prior comes from (EngineCore process)."""
