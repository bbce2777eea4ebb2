"""Extension-Manager bundle: data only (one manifest JSON). Importing this runs no vSpec code."""
