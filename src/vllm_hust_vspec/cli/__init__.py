"""Console-script entry points (thin: argument parsing and output only)."""
