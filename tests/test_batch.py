"""How many samples a batch holds, for the shapes collates return; ``None`` where it cannot be known."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch

from trainperf.torch import batch_size, map_tensors


def t(*shape):
    return torch.zeros(*shape)


def test_tensors_and_fields_that_agree():
    assert batch_size(t(7, 3)) == 7
    assert batch_size(torch.tensor(1.0)) is None
    assert batch_size((t(5, 2), t(5))) == 5
    assert batch_size([t(5, 2), t(5), t(5, 9)]) == 5  # three fields whose rows agree
    assert batch_size((t(6, 3), t(6, 3))) == 6  # two fields of one shape: (inputs, targets)
    assert batch_size((t(6, 3), t(6, 3), t(6, 3))) == 6


def test_lists_of_samples():
    assert batch_size([t(3 + i) for i in range(4)]) == 4  # four sequences of different lengths
    assert batch_size([t(3 + i) for i in range(32)]) == 32
    assert batch_size([t(3), t(4), t(5)]) is None  # three that disagree: fields or samples?
    assert batch_size([t(3), t(4)]) is None
    assert batch_size([t(128)] * 4) is None  # four of one shape: fields or samples?
    assert batch_size([torch.tensor(float(i)) for i in range(6)]) == 6  # one number per sample
    assert batch_size([torch.tensor(1.0), t(3)]) is None
    assert batch_size([{"a": 1}, {"a": 2}, {"a": 3}]) == 3
    assert batch_size(["one", "two"]) == 2


def test_images_of_different_sizes_are_samples_and_other_ranks_are_fields():
    assert batch_size([t(3, 20, 30), t(3, 24, 18)]) == 2
    assert batch_size([t(1, 28, 28 + i) for i in range(5)]) == 5
    assert batch_size([t(3, 20, 30)] * 2) == 3  # one shape: (inputs, targets) of 3 rows each
    assert batch_size([t(8, 20, 30), t(8, 24, 18)]) == 8  # 8 is no channel count: fields
    assert batch_size([t(3, 20), t(3, 24)]) == 3  # not (C, H, W): fields
    seq2seq = (t(32, 128), t(32, 128), t(32, 40), t(32, 40))
    assert batch_size(seq2seq) == 32  # four fields of two shapes


def test_mappings_and_nesting():
    assert batch_size({"input_ids": t(4, 9), "labels": t(4, 9)}) == 4
    assert batch_size({"input_ids": t(4, 9), "labels": t(5, 9)}) is None  # they disagree
    assert batch_size({"input_ids": t(4, 9), "num_items": torch.tensor(3)}) == 4
    assert batch_size(((t(8, 2), t(8, 3)), t(8))) == 8
    assert batch_size([[{"x": t(2, 2)}]]) == 2  # a batch wrapped once: not one sample
    assert batch_size((1, "text", t(4))) == 4
    assert batch_size("no tensors") is None
    assert batch_size([]) is None


def test_transposed_batches_and_named_tuples():
    images = tuple(t(3, 20 + i, 30) for i in range(5))
    targets = tuple({"boxes": t(i + 1, 4)} for i in range(5))
    assert batch_size((images, targets)) == 5
    Batch = namedtuple("Batch", "x y")
    assert batch_size(Batch(t(6, 2), t(6))) == 6
    assert batch_size(Batch(t(6, 2), t(5))) is None


def test_nesting_deeper_than_seven_levels_is_not_searched():
    deep = t(9, 2)
    for _ in range(7):
        deep = {"a": deep}
    assert batch_size(deep) == 9  # seven mappings deep: found
    assert batch_size({"a": deep}) is None  # eight: not searched
    wrapped = t(9, 2)
    for _ in range(7):
        wrapped = [wrapped]
    assert batch_size(wrapped) == 9
    assert batch_size([wrapped]) is None


@pytest.mark.parametrize("wrap", [
    pytest.param(lambda x: namedtuple("Pair", "a b")(x, x), id="named tuples"),
    pytest.param(lambda x: [x, None], id="lists with other things"),
])
def test_seven_levels_of_any_container_are_searched_and_no_more(wrap):
    deep = t(9, 2)
    for _ in range(7):
        deep = wrap(deep)
    assert batch_size(deep) == 9
    assert batch_size(wrap(deep)) is None


def test_seven_levels_of_transposed_batches_are_searched_and_no_more():
    deep = (t(9, 2), t(9, 3))
    for _ in range(6):
        deep = (deep, deep)  # every part a sequence: read part by part
    assert batch_size(deep) == 9
    assert batch_size((deep, deep)) is None


def test_a_batch_that_contains_itself_is_searched_seven_levels_deep_only():
    loop: list = [t(4, 2)]
    loop.append(loop)
    assert batch_size(loop) == 4  # the one size found; the loop below seven levels is not searched
    cycle: dict = {"x": t(4, 2)}
    cycle["self"] = cycle
    assert batch_size(cycle) == 4


def test_rgba_images_of_different_sizes_are_samples_and_four_dimensional_fields_are_fields():
    assert batch_size([t(4, 20, 30), t(4, 24, 18)]) == 2  # RGBA
    assert batch_size([t(5, 20, 30), t(5, 24, 18)]) == 5  # 5 is no channel count: fields
    assert batch_size([t(3, 8, 8, 2), t(3, 4, 4, 2)]) == 3  # not (C, H, W): fields of 3 rows


def test_parts_of_a_transposed_batch_are_read_as_batches_unless_they_hold_one_item_per_sample():
    fields = ((t(8, 2), t(8)), (t(8, 2), t(8)))  # two (inputs, targets) pairs: 8 rows, not 2
    assert batch_size(fields) == 8
    one_image = ((t(3, 20, 30),), ({"boxes": t(2, 4)},))  # a detection batch of one sample
    assert batch_size(one_image) == 1


def test_map_tensors_walks_nested_batches_and_keeps_named_tuples():
    Pair = namedtuple("Pair", "x y")
    batch = {"a": Pair(torch.ones(2), [torch.zeros(1), "label", 3]), "b": (torch.ones(1),)}
    doubled = map_tensors(batch, lambda x: x + 1)
    assert isinstance(doubled["a"], Pair) and type(doubled["b"]) is tuple and type(doubled["a"].y) is list
    assert doubled["a"].x.tolist() == [2.0, 2.0] and doubled["a"].y[0].tolist() == [1.0]
    assert doubled["a"].y[1:] == ["label", 3] and doubled["b"][0].tolist() == [2.0]
    assert batch["a"].x.tolist() == [1.0, 1.0]  # the input is left as it was
    assert map_tensors("text", lambda x: x + 1) == "text"
    with pytest.raises(TypeError, match="fn must be callable, got 5"):
        map_tensors([torch.ones(1)], 5)


def test_a_pair_of_tensors_reads_as_the_general_rules_say_whatever_its_container_and_tensor_type():
    for make in (tuple, list):
        assert batch_size(make([t(8, 4), t(8)])) == 8
        assert batch_size(make([t(8, 4), t(5)])) is None  # fields that disagree
        assert batch_size(make([t(3, 20, 30), t(3, 24, 18)])) == 2  # two images
        assert batch_size(make([t(3, 20, 30), t(3, 20, 30)])) == 3  # one shape: fields of 3 rows
        assert batch_size(make([torch.tensor(1.0), torch.tensor(2.0)])) == 2  # one number per sample
        assert batch_size(make([t(8), torch.tensor(2.0)])) is None
        assert batch_size(make([torch.nn.Parameter(t(6, 2)), t(6)])) == 6
        assert batch_size(make([t(5, 8), t(8)])) is None  # the last dimension of one is not the batch
        assert batch_size(make([t(5, 2), t(8, 5)])) is None
    deep = (t(9, 2), t(9))
    for _ in range(7):
        deep = [deep]
    assert batch_size(deep) is None  # past the depth searched, a pair too


def test_three_tensors_with_a_channel_count_first_are_images_only_when_each_is_c_h_w():
    assert batch_size([t(1, 8, 8, 2), t(1, 4, 4, 2), t(1, 2, 2, 2)]) == 1  # 4-d: fields of one row
    assert batch_size([t(1, 20), t(1, 24), t(1, 28)]) == 1  # 2-d: fields of one row
    assert batch_size([t(1, 20, 20), t(1, 24, 24), t(1, 28, 28)]) == 3  # (C, H, W): three images
