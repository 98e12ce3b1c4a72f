"""Automatic bounds: the selection histograms, the private choice of each bound, the re-plan."""
