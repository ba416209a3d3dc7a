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


def panel(fig, label: str, run: int = 1):
    """The panel of ``fig`` whose row the first run's panel labelled ``label...`` heads, in the column
    of run ``run`` (from 1)."""
    row = next(ax.get_subplotspec().rowspan.start for ax in fig.axes if ax.get_ylabel().startswith(label))
    return next(ax for ax in fig.axes
                if ax.get_subplotspec().rowspan.start == row and ax.get_subplotspec().colspan.start == run - 1)


def named_lines(ax) -> dict[str, list[float]]:
    """The lines of a panel that the legend names, by name: their y values."""
    return {line.get_label(): [float(y) for y in line.get_ydata()] for line in ax.get_lines()
            if not line.get_label().startswith("_")}
