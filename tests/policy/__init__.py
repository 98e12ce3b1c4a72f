"""The policy file and the demo: what loads, what is refused, and where."""
