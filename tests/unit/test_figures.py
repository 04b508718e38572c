"""Every plot goes through rftbus/ground/figures.py: a palette PNG, smaller than matplotlib's own and the same size in
pixels. No broker."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from rftbus.ground.figures import save_png  # noqa: E402


def test_a_plot_is_saved_as_a_smaller_palette_png_of_the_same_size(tmp_path):
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for k in range(3):
        ax.plot(range(50), [((i * (k + 1)) % 17) / 17 for i in range(50)], marker="o", label=f"arm {k}")
    ax.legend()
    ax.grid(alpha=0.3)
    plain = io.BytesIO()
    fig.savefig(plain, format="png", dpi=110)
    path = save_png(fig, tmp_path / "sub" / "p.png", dpi=110)
    plt.close(fig)
    small, big = Image.open(path), Image.open(io.BytesIO(plain.getvalue()))
    assert small.mode == "P" and small.size == big.size
    assert path.stat().st_size < 0.8 * len(plain.getvalue())
