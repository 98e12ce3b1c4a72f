"""Noise sampling: the only module of the project that draws randomness (docs/architecture.md).

`SecureSampler` draws the exact discrete Laplace and discrete Gaussian of CKS20 (arXiv:2004.00010) through
OpenDP, which samples from the OS CSPRNG: no floating-point noise (Mironov 2012), no seed, and nothing
derived from the query (docs/privacy.md §2). Values live on the integer grid and stay below 2**62 in magnitude,
so adding noise cannot reach OpenDP's saturating i64 arithmetic in practice.
`SecureSampler.exponential_index` draws an index i with probability ∝ exp(−xᵢ) for rational xᵢ exactly
(Bernoulli(exp(−x)) of CKS20 §5.1 under a uniform proposal; no floating point), for the DP quantile.
`FixedSampler` is a deterministic test seam and must never reach production.

A measurement is built once per distinct parameter (a bounded memo): it is a pure description of the
mechanism and holds no randomness, which every invocation draws afresh (docs/privacy.md §2, "Built once, drawn
every time"). It is invoked through the four FFI calls OpenDP's own `Measurement.__call__` makes, with the
argument's type, checked when the measurement is built, named once instead of looked up and parsed per call.
"""

from __future__ import annotations

import ctypes
import math
import operator
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import opendp.prelude as dp
from opendp._lib import FfiResult, FfiSlice, lib, unwrap
from opendp.core import measurement_input_carrier_type

MAX_ABS_VALUE = 2**62

_I64_VECTOR = "Vec<i64>"


class Sampler(Protocol):
    """Adds noise to every value of one release in a single vectorised call."""

    def laplace(self, values: Sequence[int], scale: float) -> tuple[int, ...]:
        """`values` plus independent discrete Laplace noise, P[Z = k] ∝ exp(−|k|/scale)."""
        ...

    def gaussian(self, values: Sequence[int], sigma: float) -> tuple[int, ...]:
        """`values` plus independent discrete Gaussian noise, P[Z = k] ∝ exp(−k²/(2σ²))."""
        ...

    def salt(self) -> int:
        """A fresh key for the per-unit choice of rows and groups, independent of the data."""
        ...

    def exponential_index(self, numerators: Sequence[int], denominator: int) -> int:
        """An index i drawn with probability ∝ exp(−numerators[i] / denominator), exactly."""
        ...


def _checked(values: Sequence[int], name: str, scale: float) -> list[int]:
    # scale 0 would mean "no noise" to OpenDP: refuse it rather than release raw values
    if isinstance(scale, bool) or not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"{name} must be finite and > 0, got {scale!r}")
    plain = list(values)
    if plain and set(map(type, plain)) == {int} and min(plain) > -MAX_ABS_VALUE and max(plain) < MAX_ABS_VALUE:
        return plain  # the common case, checked in C loops: the same verdict as the loop below
    out: list[int] = []
    for value in plain:
        if isinstance(value, bool):
            raise TypeError("values must be integers on the grid, got a bool")
        number = operator.index(value)  # TypeError for floats: noise is only added on the integer grid
        if abs(number) >= MAX_ABS_VALUE:
            raise ValueError(f"|value| must be below 2**62 on the integer grid, got {number}")
        out.append(number)
    return out


def _ffi(name: str, argtypes: list[type]) -> Callable[..., FfiResult]:
    # a function object of our own: OpenDP's wrappers set the signature of their shared one on every call
    function = lib[name]
    function.argtypes = argtypes
    function.restype = FfiResult
    return function  # type: ignore[no-any-return]


_SLICE = ctypes.POINTER(FfiSlice)
_I64S = ctypes.POINTER(ctypes.c_int64)
_SLICE_AS_OBJECT = _ffi("opendp_data__slice_as_object", [_SLICE, ctypes.c_char_p])
_INVOKE = _ffi("opendp_core__measurement_invoke", [dp.Measurement, ctypes.c_void_p])
_OBJECT_AS_SLICE = _ffi("opendp_data__object_as_slice", [ctypes.c_void_p])
_SLICE_FREE = _ffi("opendp_data__slice_free", [ctypes.c_void_p])
_OBJECT_FREE = _ffi("opendp_data__object_free", [ctypes.c_void_p])


def _ok(result: FfiResult) -> int:
    """The address an FFI call returned; its error, if any, raised (and freed) by OpenDP's own `unwrap`."""
    if result.tag != 0:
        unwrap(result, ctypes.c_void_p)  # always raises OpenDPException for an error result
    return result.payload.Ok  # type: ignore[no-any-return]


def _invoke(measurement: dp.Measurement, values: list[int]) -> list[int]:
    """`measurement(values)` for a measurement on Vec<i64>: the same calls into OpenDP's library, in the same
    order, as `Measurement.__call__` makes (argument to AnyObject, invoke, answer to slice, read, free), with the
    argument's type named once (`_on_i64_vectors` checked it) instead of looked up and parsed per call, and the
    values copied as one i64 array instead of converted one by one (`_checked` already made them ints)."""
    n = len(values)
    array = (ctypes.c_int64 * n)(*values)
    argument = _ok(_SLICE_AS_OBJECT(ctypes.byref(FfiSlice(ctypes.cast(array, ctypes.c_void_p), n)),
                                    _I64_VECTOR.encode()))  # OpenDP copies the values into its own Vec
    try:
        answer = _ok(_INVOKE(measurement, argument))
    finally:
        _ok(_OBJECT_FREE(argument))
    try:
        raw = _ok(_OBJECT_AS_SLICE(answer))  # a view of the answer's Vec<i64>, valid while `answer` lives
        try:
            view = ctypes.cast(raw, _SLICE).contents
            if view.len != n:  # a measurement on Vec<i64> maps n values to n values
                raise RuntimeError(f"the sampler returned {view.len} values for {n}")
            return ctypes.cast(view.ptr, _I64S)[:n]  # copied out as Python ints before anything is freed
        finally:
            _ok(_SLICE_FREE(raw))
    finally:
        _ok(_OBJECT_FREE(answer))


def _on_i64_vectors(measurement: dp.Measurement) -> dp.Measurement:
    carrier = measurement_input_carrier_type(measurement)
    if carrier != _I64_VECTOR:  # `_invoke` names this type: refuse any other rather than misread memory
        raise TypeError(f"the sampler's measurement takes {carrier}, not {_I64_VECTOR}")
    return measurement


@lru_cache(maxsize=2)
def _space(distance: str) -> tuple[dp.Domain, dp.Metric]:
    """Vectors of i64 under the L1 or L2 distance: immutable descriptions, built once (most of a
    measurement's construction cost was rebuilding them per scale)."""
    dp.enable_features("contrib")
    metric = dp.l1_distance(T=dp.i64) if distance == "l1" else dp.l2_distance(T=dp.i64)
    return dp.vector_domain(dp.atom_domain(T=dp.i64)), metric


@lru_cache(maxsize=256)
def _laplace_measurement(scale: float) -> dp.Measurement:
    return _on_i64_vectors(dp.m.make_laplace(*_space("l1"), scale=scale))


@lru_cache(maxsize=256)
def _gaussian_measurement(sigma: float) -> dp.Measurement:
    return _on_i64_vectors(dp.m.make_gaussian(*_space("l2"), scale=sigma))


def _checked_exponents(numerators: Sequence[int], denominator: int) -> list[int]:
    if isinstance(denominator, bool) or not isinstance(denominator, int) or denominator < 1:
        raise ValueError(f"denominator must be an integer >= 1, got {denominator!r}")
    if not numerators:
        raise ValueError("numerators must be non-empty")
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in numerators):
        raise TypeError("numerators must be non-negative integers: exact rationals, never floats")
    return list(numerators)


def _bernoulli_exp_at_most_one(numerator: int, denominator: int) -> bool:
    """Exactly Bernoulli(exp(−γ)) for γ = numerator/denominator in [0, 1] (CKS20 Algorithm 1): K counts
    successes of Bernoulli(γ/k), so P[K > k] = γᵏ/k! and P[K odd] = Σₙ (−γ)ⁿ/n! = e^(−γ)."""
    k = 1
    while secrets.randbelow(denominator * k) < numerator:  # Bernoulli(γ/k), exact on integers
        k += 1
    return k % 2 == 1


def _bernoulli_exp(numerator: int, denominator: int) -> bool:
    """Exactly Bernoulli(exp(−γ)) for γ = numerator/denominator >= 0: e^(−γ) = (e^(−1))^⌊γ⌋ · e^(−frac γ)."""
    whole, rest = divmod(numerator, denominator)
    for _ in range(whole):  # stops at the first failure: fewer than 1/(1 − e^(−1)) rounds expected
        if not _bernoulli_exp_at_most_one(1, 1):
            return False
    return _bernoulli_exp_at_most_one(rest, denominator)


@dataclass(frozen=True, slots=True)
class SecureSampler:
    """The production sampler: OpenDP's exact discrete samplers on the OS CSPRNG."""

    def laplace(self, values: Sequence[int], scale: float) -> tuple[int, ...]:
        """`values` plus independent discrete Laplace noise of `scale`.

        Example:
            >>> noisy = SecureSampler().laplace([10, 20, 30], scale=2.0)
            >>> len(noisy), all(isinstance(v, int) for v in noisy)
            (3, True)
            >>> SecureSampler().laplace([], scale=2.0)
            ()
        """
        checked = _checked(values, "scale", scale)
        if not checked:
            return ()
        return tuple(_invoke(_laplace_measurement(float(scale)), checked))

    def salt(self) -> int:
        """A fresh 62-bit key for the per-unit choice of rows and groups, from the OS CSPRNG.

        Example:
            >>> 0 <= SecureSampler().salt() < 2**62
            True
        """
        return secrets.randbits(62)

    def gaussian(self, values: Sequence[int], sigma: float) -> tuple[int, ...]:
        """`values` plus independent discrete Gaussian noise of `sigma`.

        Example:
            >>> noisy = SecureSampler().gaussian([2**40, -5], sigma=3.0)
            >>> abs(noisy[0] - 2**40) < 100, len(noisy)
            (True, 2)
        """
        checked = _checked(values, "sigma", sigma)
        if not checked:
            return ()
        return tuple(_invoke(_gaussian_measurement(float(sigma)), checked))

    def exponential_index(self, numerators: Sequence[int], denominator: int) -> int:
        """Index i with probability exactly exp(−xᵢ)/Σⱼ exp(−xⱼ), xᵢ = numerators[i]/denominator, by
        rejection from a uniform proposal.

        Shifting every exponent by the smallest one leaves the distribution unchanged and makes the best
        candidate's acceptance probability 1, so a round accepts with probability ≥ 1/len(numerators).
        The number of rounds depends on the weights (a timing channel: docs/privacy.md §9).

        Example:
            >>> SecureSampler().exponential_index([4000, 0, 3000], denominator=10)
            1
        """
        checked = _checked_exponents(numerators, denominator)
        least = min(checked)
        shifted = [x - least for x in checked]
        while True:
            i = secrets.randbelow(len(shifted))
            if _bernoulli_exp(shifted[i], denominator):
                return i


@dataclass(frozen=True, slots=True)
class FixedSampler:
    """Test seam: adds `offsets` cycled over the values instead of noise. Never use it in production."""

    offsets: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if not self.offsets or any(isinstance(o, bool) or not isinstance(o, int) for o in self.offsets):
            raise ValueError(f"offsets must be a non-empty tuple of ints, got {self.offsets!r}")

    def _add(self, values: Sequence[int], name: str, scale: float) -> tuple[int, ...]:
        checked = _checked(values, name, scale)
        return tuple(v + self.offsets[i % len(self.offsets)] for i, v in enumerate(checked))

    def laplace(self, values: Sequence[int], scale: float) -> tuple[int, ...]:
        """`values` plus the offsets, cycled; `scale` is validated and otherwise ignored.

        Example:
            >>> FixedSampler((1, -1)).laplace([10, 10, 10], scale=2.0)
            (11, 9, 11)
        """
        return self._add(values, "scale", scale)

    def salt(self) -> int:
        """Always 0: a test seam is reproducible."""
        return 0

    def gaussian(self, values: Sequence[int], sigma: float) -> tuple[int, ...]:
        """`values` plus the offsets, cycled; `sigma` is validated and otherwise ignored.

        Example:
            >>> FixedSampler().gaussian([3, 4], sigma=1.0)
            (3, 4)
        """
        return self._add(values, "sigma", sigma)

    def exponential_index(self, numerators: Sequence[int], denominator: int) -> int:
        """The most likely index (the first smallest exponent), as if there were no noise.

        Example:
            >>> FixedSampler().exponential_index([6, 1, 1], denominator=2)
            1
        """
        checked = _checked_exponents(numerators, denominator)
        return checked.index(min(checked))
