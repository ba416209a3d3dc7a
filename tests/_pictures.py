"""What a test can check of a picture: that it is one, and not an empty canvas."""

from __future__ import annotations


def assert_drawn(path) -> None:
    """A real picture: a PNG that decodes, of a plot's size, with more than a blank page's colours."""
    import matplotlib.image

    image = matplotlib.image.imread(str(path))
    height, width = image.shape[:2]
    assert height >= 300 and width >= 400, image.shape
    colours = {tuple(pixel) for pixel in image.reshape(-1, image.shape[2])[:: max(1, height * width // 20000)]}
    assert len(colours) > 20, len(colours)  # lines, bars and text, not an empty canvas
