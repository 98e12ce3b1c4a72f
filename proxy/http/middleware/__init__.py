"""Pure ASGI middleware around the routes: body gate, access log, path rules, audit trail, throttle."""
