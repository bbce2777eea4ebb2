"""EngineCore process: the per-step scheduler hook, its cost priors and telemetry."""
