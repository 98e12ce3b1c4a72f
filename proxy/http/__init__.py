"""The HTTP surface: routes, the error handler, metrics, answer formats, the dashboard."""
