"""Noise sampling: the only module of the project that draws randomness (STYLE.md B6).

`SecureSampler` draws the exact discrete Laplace and discrete Gaussian of CKS20 (arXiv:2004.00010) through
OpenDP, which samples from the OS CSPRNG: no floating-point noise (Mironov 2012), no seed, and nothing
derived from the query (DESIGN.md §5). Values live on the integer grid and stay below 2**62 in magnitude,
so adding noise cannot reach OpenDP's saturating i64 arithmetic in practice.
`FixedSampler` is a deterministic test seam and must never reach production.
"""

from __future__ import annotations

import math
import operator
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import opendp.prelude as dp

MAX_ABS_VALUE = 2**62

_Measurement = Callable[[list[int]], list[int]]


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


def _checked(values: Sequence[int], name: str, scale: float) -> list[int]:
    # scale 0 would mean "no noise" to OpenDP: refuse it rather than release raw values
    if isinstance(scale, bool) or not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"{name} must be finite and > 0, got {scale!r}")
    out: list[int] = []
    for value in values:
        if isinstance(value, bool):
            raise TypeError("values must be integers on the grid, got a bool")
        number = operator.index(value)  # TypeError for floats: noise is only added on the integer grid
        if abs(number) >= MAX_ABS_VALUE:
            raise ValueError(f"|value| must be below 2**62 on the integer grid, got {number}")
        out.append(number)
    return out


@lru_cache(maxsize=256)
def _laplace_measurement(scale: float) -> _Measurement:
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64)
    return dp.m.make_laplace(*space, scale=scale)


@lru_cache(maxsize=256)
def _gaussian_measurement(sigma: float) -> _Measurement:
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l2_distance(T=dp.i64)
    return dp.m.make_gaussian(*space, scale=sigma)


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
        return tuple(int(v) for v in _laplace_measurement(float(scale))(checked))

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
        return tuple(int(v) for v in _gaussian_measurement(float(sigma))(checked))


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
