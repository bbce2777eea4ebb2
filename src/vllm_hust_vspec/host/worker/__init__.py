"""Worker processes (one per rank): patches of the model runner, one folder per runner."""
