"""Method specifics shared by every host: acceptance rules, speculative-config building."""
