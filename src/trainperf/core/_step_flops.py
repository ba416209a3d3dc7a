"""The FLOPs of an optimizer step from the shape of the batches it trained on, from a few counted steps.

A step's *shape* is ``(micro_batches, sum of b*L, sum of b*L*L)`` over its micro-batches, ``b`` the
rows of a micro-batch's input and ``L`` its size per row (the sequence length of token ids; all but
the first dimension of anything else). A model's FLOPs are linear in the rows and, for a transformer,
linear and quadratic in the length (the products, and attention), with a constant for the optimizer::

    FLOPs(step) = c0 + c1 * sum(b*L) + c2 * sum(b*L*L)

A shape counted once is known exactly from then on (:meth:`ShapeFlops.add`); three distinct counted
shapes determine the three constants, and the fit is trusted once it predicts a further count within
:data:`TOLERANCE`. Until then, adapters count each step whose first micro-batch has a shape no counted
step began with, and the step after one whose whole shape was not counted (under gradient accumulation
the later micro-batches may vary while the first does not), at most ``max_counts`` steps per run:
dynamic padding over hundreds of lengths costs a handful of counted steps. The steps before the fit
holds carry its approximation (one counted shape: FLOPs in proportion to the tokens). Pure arithmetic
on plain numbers: it knows no framework.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ShapeFlops", "StepShape", "TOLERANCE", "MAX_COUNTS"]

#: ``(micro_batches, sum of b*L, sum of b*L*L)`` of one optimizer step.
StepShape = tuple[int, int, int]

#: How close a fit must predict a further counted step (relative) before it is trusted.
TOLERANCE = 0.01

#: The most steps counted per run while the fit is not trusted yet.
MAX_COUNTS = 8


class ShapeFlops:
    """The counted steps' FLOPs by shape, and the fit of their dependence on the length.

    Args:
        max_counts: the most steps :meth:`wants` asks to count.
        say: says a note once (the listener wires its own notices in).

    Example:
        >>> shapes = ShapeFlops()
        >>> for length in (64, 128, 256, 512):   # FLOPs = 10 + 3*b*L + b*L*L, b = 4
        ...     shapes.add((1, 4 * length, 4 * length * length), 10 + 12 * length + 4 * length ** 2, (4, length))
        >>> shapes.trusted, shapes.wants((4, 100))
        (True, False)
        >>> round(shapes.flops((1, 400, 40000)))   # b = 4, L = 100, never counted
        41210
    """

    __slots__ = ("max_counts", "say", "counted", "firsts", "counts", "trusted", "worst", "owed", "_fit")

    def __init__(self, max_counts: int = MAX_COUNTS, say: Callable[[str], None] | None = None) -> None:
        if isinstance(max_counts, bool) or not isinstance(max_counts, int) or max_counts < 1:
            raise ValueError(f"max_counts must be a positive int, got {max_counts!r}")
        self.max_counts = max_counts
        self.say = say
        self.counted: dict[StepShape, float] = {}  # exact FLOPs of every counted shape
        self.firsts: set[object] = set()  # the first micro-batches of counted steps
        self.counts = 0
        self.trusted = False
        self.worst = 0.0  # the largest relative miss of a fit's prediction against a later count
        self.owed = False  # a step of a shape not counted went by: the next step is counted
        self._fit: tuple[float, float, float] | None = None  # (c0, c1, c2)

    def wants(self, first: object) -> bool:
        """Whether to count a step whose first micro-batch has shape ``first`` (``None``: not seen)."""
        if self.trusted or self.counts >= self.max_counts:
            return False
        if first is None:  # no shape: the first count is all there is
            return self.counts == 0
        return self.owed or first not in self.firsts

    def passed(self, shape: StepShape) -> None:
        """A step of ``shape`` went by without being counted: while the fit does not hold, a shape not
        counted yet has the next step counted (whatever its first micro-batch)."""
        if not self.trusted and self.counts and shape not in self.counted:
            self.owed = True

    def add(self, shape: StepShape, flops: float, first: object = None) -> None:
        """A counted step of ``shape`` (its first micro-batch ``first``) did ``flops``."""
        self.counts += 1
        self.owed = False
        self.firsts.add(first)
        if shape in self.counted:
            self.counted[shape] = flops
            return
        fit = self._fit
        if fit is not None and len(self.counted) >= 3:  # a further count checks the fit
            predicted = fit[0] + fit[1] * shape[1] + fit[2] * shape[2]
            miss = abs(predicted - flops) / flops if flops > 0 else (0.0 if predicted == 0 else 1.0)
            self.worst = max(self.worst, miss)
            if miss <= TOLERANCE:
                self.trusted = True
        self.counted[shape] = flops
        self._fit = fit_flops(self.counted)
        if not self.trusted and self.counts >= self.max_counts and self.say is not None:
            self.say(f"the FLOPs per step of shapes not counted follow a fit of {len(self.counted)} counted "
                     f"shapes that missed a further count by up to {self.worst:.1%}: tflops_per_sec and MFU "
                     "are that approximate (pass flops_per_step= to give them)")

    def flops(self, shape: StepShape) -> float | None:
        """The FLOPs of a step of ``shape``: counted, else from the fit (``None``: nothing counted)."""
        exact = self.counted.get(shape)
        if exact is not None:
            return exact
        fit = self._fit
        if fit is None:
            return None
        return max(0.0, fit[0] + fit[1] * shape[1] + fit[2] * shape[2])


def fit_flops(counted: dict[StepShape, float]) -> tuple[float, float, float] | None:
    """``(c0, c1, c2)`` of ``FLOPs = c0 + c1*s1 + c2*s2`` over the counted shapes, least squares: one
    shape gives FLOPs in proportion to ``s1``, two add the quadratic term, three or more the constant
    too (fewer terms when the shapes cannot tell them apart). ``None`` when nothing is counted."""
    if not counted:
        return None
    rows = [(float(s1), float(s2), flops) for (_, s1, s2), flops in counted.items()]
    for terms in ((0, 1, 2), (1, 2), (0, 1), (1,)) if len(rows) >= 3 else ((1, 2), (1,)) if len(rows) == 2 else ((1,),):
        solved = _least_squares(rows, terms)
        if solved is not None:
            return solved
    return None


def _least_squares(rows: list[tuple[float, float, float]], terms: tuple[int, ...]) -> tuple[float, float, float] | None:
    """Solve for the coefficients of ``terms`` (0: constant, 1: s1, 2: s2), columns scaled to their
    largest value so that a length's square does not swamp the constant; ``None`` when singular."""
    columns = [[1.0 if t == 0 else row[t - 1] for row in rows] for t in terms]
    scales = [max(abs(v) for v in col) or 1.0 for col in columns]
    columns = [[v / s for v in col] for col, s in zip(columns, scales, strict=True)]
    ys = [row[2] for row in rows]
    y_scale = max(abs(y) for y in ys) or 1.0
    ys = [y / y_scale for y in ys]
    k = len(terms)
    # normal equations A^T A x = A^T y, by Gaussian elimination with partial pivoting
    m = [[sum(a * b for a, b in zip(columns[i], columns[j], strict=True)) for j in range(k)]
         + [sum(a * y for a, y in zip(columns[i], ys, strict=True))] for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(k):
            if r != col:
                factor = m[r][col] / m[col][col]
                m[r] = [a - factor * b for a, b in zip(m[r], m[col], strict=True)]
    coefficients = [0.0, 0.0, 0.0]
    for i, t in enumerate(terms):
        coefficients[t] = m[i][k] / m[i][i] / scales[i] * y_scale
    return coefficients[0], coefficients[1], coefficients[2]
