"""Fitting the alpha-beta model (latency alpha in s, beta in s/B) to measured collective times."""
from __future__ import annotations

import math
from dataclasses import dataclass

from labutils.costmodel._checks import GB, check_nonnegative, check_positive_int, choice_error
from labutils.costmodel.collectives import collective_time

#: how :func:`fit_alpha_beta` weighs the points: errors in seconds, or relative errors (1/t^2)
FIT_WEIGHTINGS = ("absolute", "relative")


@dataclass(frozen=True)
class AlphaBetaFit:
    """A least-squares fit of the alpha-beta model to measured collective times.

    ``alpha`` seconds per message, ``beta`` seconds per byte, ``bandwidth_GBps`` = 1/beta
    in GB/s (for a ring all-reduce this is the bus bandwidth, nccl-tests' busbw), ``r2`` the
    coefficient of determination of the fit, in the ``weighting`` it was fitted with
    ("absolute": on seconds; "relative": weighted by 1/t^2, i.e. on relative errors).
    """

    alpha: float
    beta: float
    bandwidth_GBps: float
    r2: float
    op: str = "all_reduce"
    algorithm: str = "ring"
    world_size: int = 2
    weighting: str = "absolute"

    def predict(self, nbytes: float) -> float:
        """Seconds the fitted model gives for a buffer of ``nbytes`` bytes."""
        return collective_time(self.op, self.algorithm, nbytes, self.world_size, self.alpha, self.beta)


def fit_alpha_beta(
    sizes_bytes,
    times_s,
    op: str = "all_reduce",
    algorithm: str = "ring",
    *,
    world_size: int,
    weighting: str = "absolute",
) -> AlphaBetaFit:
    """Fit alpha (s) and beta (s/B) to measured (size in bytes, seconds) points.

    The model time is linear in alpha and beta, t = A alpha + B(n) beta, with A and B(n)
    taken from :func:`collective_time` for ``op``/``algorithm`` on ``world_size`` ranks
    (gamma is folded into beta). Least squares with both constrained to be >= 0.

    ``weighting``: "absolute" minimises the sum of squared errors in seconds, so the
    largest messages dominate and alpha (the small-message time) can come out far off;
    "relative" minimises the sum of squared relative errors ((fit - t) / t)^2, i.e.
    weights 1/t^2, so a 10 us error on a 20 us point counts as much as 10 ms on 20 ms:
    use it when alpha matters (a sweep from 8 B up). Every time must then be > 0.
    """
    sizes = [float(s) for s in sizes_bytes]
    times = [float(t) for t in times_s]
    if len(sizes) != len(times):
        raise ValueError(f"sizes_bytes and times_s differ in length ({len(sizes)} vs {len(times)})")
    if len(set(sizes)) < 2:
        raise ValueError("fit_alpha_beta needs at least two distinct message sizes")
    check_positive_int(world_size=world_size)
    if world_size < 2:
        raise ValueError("fit_alpha_beta needs world_size >= 2 (one rank communicates nothing)")
    if weighting not in FIT_WEIGHTINGS:
        raise choice_error("weighting", weighting, FIT_WEIGHTINGS)
    for s, t in zip(sizes, times):
        check_nonnegative(size=s, time=t)
    if weighting == "relative" and min(times) <= 0:
        raise ValueError("weighting='relative' divides by each time: every time must be > 0 seconds")
    a_coef = [collective_time(op, algorithm, s, world_size, alpha=1.0, beta=0.0) for s in sizes]
    b_coef = [collective_time(op, algorithm, s, world_size, alpha=0.0, beta=1.0) for s in sizes]
    # Weighted least squares: scaling row i by sqrt(w_i) = 1/t_i minimises sum w_i (fit_i - t_i)^2.
    scale = [1.0 / t for t in times] if weighting == "relative" else [1.0] * len(times)
    alpha, beta = _nonnegative_least_squares_2([a * k for a, k in zip(a_coef, scale)],
                                               [b * k for b, k in zip(b_coef, scale)],
                                               [t * k for t, k in zip(times, scale)])
    fitted = [alpha * a + beta * b for a, b in zip(a_coef, b_coef)]
    weights = [k * k for k in scale]
    mean = sum(w * t for w, t in zip(weights, times)) / sum(weights)
    ss_tot = sum(w * (t - mean) ** 2 for w, t in zip(weights, times))
    ss_res = sum(w * (t - f) ** 2 for w, t, f in zip(weights, times, fitted))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    bandwidth = 1.0 / beta / GB if beta > 0 else math.inf
    return AlphaBetaFit(alpha, beta, bandwidth, r2, op, algorithm, int(world_size), weighting)


def _nonnegative_least_squares_2(x1: list[float], x2: list[float], y: list[float]) -> tuple[float, float]:
    """min ||c1 x1 + c2 x2 - y|| with c1, c2 >= 0 (two unknowns: try the interior, then each edge)."""
    s11 = sum(a * a for a in x1)
    s22 = sum(b * b for b in x2)
    s12 = sum(a * b for a, b in zip(x1, x2))
    s1y = sum(a * v for a, v in zip(x1, y))
    s2y = sum(b * v for b, v in zip(x2, y))
    det = s11 * s22 - s12 * s12
    if det > 0:
        c1 = (s1y * s22 - s2y * s12) / det
        c2 = (s2y * s11 - s1y * s12) / det
        if c1 >= 0 and c2 >= 0:
            return c1, c2

    def residual(c1: float, c2: float) -> float:
        return sum((c1 * a + c2 * b - v) ** 2 for a, b, v in zip(x1, x2, y))

    edges = [(max(s1y / s11, 0.0) if s11 > 0 else 0.0, 0.0),
             (0.0, max(s2y / s22, 0.0) if s22 > 0 else 0.0)]
    return min(edges, key=lambda c: residual(*c))

