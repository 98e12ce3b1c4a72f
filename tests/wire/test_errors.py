"""Every product error reaches a PostgreSQL client with a SQLSTATE of its class: a refusal (4xx) never as an
internal error (XX000), and the product's stable code first in the message (proxy/wire/errors.py)."""

from __future__ import annotations

import importlib
import pkgutil

import proxy
from accountant.errors import ProxyError
from proxy.http.errors import STATUS
from proxy.wire.errors import SQLSTATE, error_message


def _every_subclass(cls: type) -> list[type]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _every_subclass(sub))]


def test_every_refusal_gets_a_client_error_sqlstate_and_its_code() -> None:
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if "spark" not in info.name and info.name != "proxy.__main__":
            importlib.import_module(info.name)
    raised = [c for c in _every_subclass(ProxyError) if not c.__subclasses__()]
    assert len(raised) >= 15
    for cls in raised:
        err = cls.__new__(cls)
        ProxyError.__init__(err, "a message")  # each class's own arguments aside: its code and status decide
        reply = error_message(err)
        state = SQLSTATE.get(cls.code) or ("22023" if cls.status < 500 else "XX000")
        assert f"C{state}".encode() in reply, (cls.__name__, cls.code)
        assert f"{cls.code}: ".encode() in reply
        if STATUS.get(cls.code, 500) < 500:
            assert not state.startswith("XX"), cls.code
