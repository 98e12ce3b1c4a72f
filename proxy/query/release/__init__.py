"""From exact per-group measures to a release: partition selection, noise, post-processing."""
