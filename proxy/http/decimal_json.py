"""JSON request bodies with exact decimal numbers: ε and δ keep the request's own digits until priced.

Python's json.loads turns 0.1 into the nearest float, 0.1000000000000000055…, a hair above what the analyst
wrote, and ten of them exceed a budget of 1. Here every JSON number (integers too) is read as a
`decimal.Decimal` of exactly its digits, and NaN/Infinity as Decimal's non-finite values, which the request
model then refuses with a clear message (proxy/schemas.py); nothing is parsed twice. The route class is
FastAPI's documented way to substitute the request's JSON decoding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from decimal import Decimal
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def loads(body: bytes | str) -> Any:
    """JSON with every number as an exact Decimal (NaN, Infinity and -Infinity included, as Decimals).

    Example:
        >>> loads('{"epsilon": 0.1, "delta": 1E-6, "n": 3, "x": NaN}')
        {'epsilon': Decimal('0.1'), 'delta': Decimal('0.000001'), 'n': Decimal('3'), 'x': Decimal('NaN')}
    """
    return json.loads(body, parse_float=Decimal, parse_int=Decimal, parse_constant=Decimal)


class DecimalRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class DecimalJSONRoute(APIRoute):
    """An APIRoute whose JSON bodies are decoded by `loads`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def decimal_handler(request: Request) -> Response:
            return await handler(DecimalRequest(request.scope, request.receive))

        return decimal_handler
