"""FLOPs by step shape from plain numbers: a counted shape exact, the fit of the length's linear and
quadratic terms trusted only once it predicts a further count, a cap on counts with the fit's miss
said once, and a window's FLOPs per step as the sum of its iterations' shapes over its steps."""

from __future__ import annotations

import pytest

from trainperf.core._flop_policy import window_flops
from trainperf.core._pending import StepFlops
from trainperf.core._step_flops import MAX_COUNTS, ShapeFlops, fit_flops


def shape(b: int, length: int, micro: int = 1) -> tuple[int, int, int]:
    """A step of ``micro`` micro-batches of ``b`` rows of ``length``."""
    return micro, micro * b * length, micro * b * length * length


def transformer(b: int, length: int, micro: int = 1) -> float:
    """A made-up model: 6e5 per token, 2e3 per token and position (attention), 5e4 for the optimizer."""
    return micro * b * (6e5 * length + 2e3 * length * length) + 5e4


def test_a_counted_shape_is_exact_and_a_repeated_first_micro_batch_is_not_counted_again():
    shapes = ShapeFlops()
    assert shapes.flops(shape(4, 64)) is None  # nothing counted: nothing known
    assert shapes.wants((4, 256))
    shapes.add(shape(4, 64), 123.0, (4, 256))
    assert not shapes.wants((4, 256)) and shapes.wants((4, 2048))
    assert shapes.flops(shape(4, 64)) == 123.0


def test_a_step_of_a_shape_not_counted_has_the_next_step_counted_whatever_its_first_micro_batch():
    shapes = ShapeFlops()
    first = (4, 1024)  # under accumulation the first micro-batch may never change while the others do
    shapes.add(shape(4, 256, micro=3), transformer(4, 256, micro=3), first)
    shapes.passed(shape(4, 256, micro=3))  # a counted shape going by owes nothing
    assert not shapes.wants(first)
    shapes.passed((3, 4 * (256 + 32 + 768), 4 * (256**2 + 32**2 + 768**2)))
    assert shapes.wants(first)  # the next step is counted, though it starts as the counted one did
    shapes.add(shape(4, 100, micro=3), transformer(4, 100, micro=3), first)
    assert not shapes.wants(first)  # paid
    for length in (30, 500, 700):
        shapes.add(shape(4, length, micro=3), transformer(4, length, micro=3), first)
    assert shapes.trusted
    shapes.passed(shape(4, 999, micro=3))  # once the fit holds nothing more is counted
    assert not shapes.wants(first) and not shapes.owed


def test_nothing_is_owed_before_the_first_count_or_once_the_cap_is_reached():
    shapes = ShapeFlops(max_counts=2)
    shapes.passed(shape(4, 64))  # before the first count (the first step is never counted)
    assert not shapes.owed
    shapes.add(shape(4, 64), 1.0, (4, 64))
    shapes.add(shape(4, 128), 2.0, (4, 128))
    shapes.passed(shape(4, 999))
    assert not shapes.wants((4, 64))  # the cap


def test_three_counted_lengths_determine_the_fit_and_a_fourth_that_agrees_makes_it_trusted():
    shapes = ShapeFlops()
    for length in (16, 100, 700):
        shapes.add(shape(2, length), transformer(2, length), (2, length))
    assert not shapes.trusted and shapes.wants((2, 333))
    assert shapes.flops(shape(2, 333)) == pytest.approx(transformer(2, 333), rel=1e-9)
    shapes.add(shape(2, 1024), transformer(2, 1024), (2, 1024))  # the check
    assert shapes.trusted and not shapes.wants((2, 50)) and shapes.counts == 4
    for b, length, micro in ((1, 17, 1), (8, 1000, 1), (3, 250, 4)):
        assert shapes.flops(shape(b, length, micro)) == pytest.approx(transformer(b, length, micro), rel=1e-9)


def test_with_fewer_shapes_the_fit_scales_by_tokens_then_adds_the_square():
    one = fit_flops({shape(2, 10): 200.0})
    assert one == (0.0, pytest.approx(10.0), 0.0)
    two = fit_flops({shape(1, 10): 10 * 3 + 100 * 5.0, shape(1, 40): 40 * 3 + 1600 * 5.0})
    assert two is not None and two[1] == pytest.approx(3.0) and two[2] == pytest.approx(5.0)
    assert fit_flops({}) is None


def test_counts_stop_at_the_cap_when_no_fit_agrees_and_the_miss_is_said_once():
    said: list[str] = []
    shapes = ShapeFlops(say=said.append)
    for length in range(10, 10 + 5 * (MAX_COUNTS + 3), 5):
        first = (1, length)
        if shapes.wants(first):
            shapes.add(shape(1, length), float(length) ** 3, first)  # cubic: no fit of this form agrees
    assert shapes.counts == MAX_COUNTS and not shapes.trusted
    assert not shapes.wants((1, 9999))
    assert len(said) == 1 and said[0].startswith(f"the FLOPs per step of shapes not counted follow a fit of "
                                                f"{MAX_COUNTS} counted shapes that missed a further count by up to")
    with pytest.raises(ValueError, match="max_counts must be a positive int, got 0"):
        ShapeFlops(max_counts=0)


def test_without_shapes_one_count_is_wanted():
    shapes = ShapeFlops()
    assert shapes.wants(None)
    shapes.counts = 1
    assert not shapes.wants(None)


def test_a_windows_flops_per_step_are_its_shapes_summed_over_its_steps():
    shapes = ShapeFlops()
    short, long = shape(4, 64), shape(4, 512)
    shapes.add(short, 1.0e9, (4, 64))
    shapes.add(long, 9.5e9, (4, 512))
    flops = StepFlops(9.5e9, None, shapes)  # per_step: the first count
    assert window_flops(flops, {short: 2, long: 2}, 4, 4) == pytest.approx(5.25e9)
    assert window_flops(flops, {short: 3}, 4, 4) == pytest.approx((3 * 1e9 + 9.5e9) / 4)  # one not followed
    assert window_flops(flops, {}, 4, 4) == 9.5e9  # nothing followed: the count, as counted
    assert window_flops(StepFlops(7e9, None, None), {short: 4}, 4, 4) == 7e9  # given: it wins
    assert window_flops(None, {short: 4}, 4, 4) is None


def test_a_fixed_shape_gives_its_count_exactly():
    shapes = ShapeFlops()
    one = shape(3, 7)
    count = 0.1 + 0.2  # a float that a sum and a division would not give back exactly
    shapes.add(one, count, (3, 7))
    assert window_flops(StepFlops(count, None, shapes), {one: 3}, 3, 3) == count


def test_shapes_that_cannot_tell_the_terms_apart_fall_back_to_fewer_terms():
    # one length only: b*L*L is L times b*L in every shape, so the square cannot be told from the rest
    rows = {shape(b, 64): 7.0 * b * 64 + 100.0 for b in (1, 2, 4)}
    c0, c1, c2 = fit_flops(rows)
    assert c2 == 0.0 and c0 == pytest.approx(100.0) and c1 == pytest.approx(7.0)
    two = {shape(b, 64): 7.0 * b * 64 for b in (1, 2)}  # two shapes of one length: in proportion to tokens
    assert fit_flops(two) == pytest.approx((0.0, 7.0, 0.0))
    one = {shape(2, 64): 256.0}
    assert fit_flops(one) == pytest.approx((0.0, 2.0, 0.0))
    assert fit_flops({}) is None


def test_a_count_of_zero_flops_is_trusted_only_when_the_fit_says_zero_too():
    zero = ShapeFlops()
    for length in (16, 100, 700, 300):
        zero.add(shape(4, length), 0.0, (4, length))
    assert zero.trusted and zero.worst == 0.0 and zero.flops(shape(4, 50)) == 0.0
    shapes = ShapeFlops()
    for length in (16, 100, 700):
        shapes.add(shape(4, length), transformer(4, length), (4, length))
    shapes.add(shape(4, 300), 0.0, (4, 300))  # a step whose products ran where the counter cannot see
    assert not shapes.trusted and shapes.worst == 1.0


def test_the_fit_is_trusted_within_its_tolerance_and_the_worst_miss_is_kept():
    from trainperf.core._step_flops import TOLERANCE

    for off, trusted in ((0.5 * TOLERANCE, True), (2.0 * TOLERANCE, False)):
        shapes = ShapeFlops()
        for length in (16, 100, 700):
            shapes.add(shape(4, length), transformer(4, length), (4, length))
        shapes.add(shape(4, 300), transformer(4, 300) * (1 + off), (4, 300))
        assert shapes.trusted is trusted
        assert shapes.worst == pytest.approx(off / (1 + off), rel=1e-3)
