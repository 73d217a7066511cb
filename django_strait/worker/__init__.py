"""The worker: claims runs in batches, executes them, records results in batches."""
