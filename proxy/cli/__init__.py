"""Command-line tools besides `serve`: the demo dataset and policy, the audit check."""
