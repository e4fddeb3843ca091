"""The PNG plots of ``attn report`` (matplotlib, Agg backend): one function per picture, each
taking already validated rows and a path, writing the file and returning nothing."""

from __future__ import annotations

__all__ = ["bars", "utilization_vs_k", "board_resources", "family_resources"]


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)


def bars(path, labels, values, ylabel, title, *, percent=False, target=None) -> None:
    """One bar per label; ``percent`` fixes the axis to 0..100, ``target`` draws a line."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * len(labels) + 2), 3.6))
    ax.bar(range(len(labels)), values, color="tab:blue")
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if target is not None:
        ax.axhline(target, color="tab:red", linestyle="--", label=f"target {target:g}")
        ax.legend(fontsize=8)
    if percent:
        ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def utilization_vs_k(path, runs) -> None:
    """Systolic array: end-to-end utilization against the reduction length K, one line per
    array shape and multiplier kind (``runs``: rows of ``bench/systolic.py``)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    groups = {}
    for r in runs:
        groups.setdefault(f"{r['rows']}x{r['cols']} {r.get('dsp', 'infer')}", []).append(r)
    for label, group in sorted(groups.items()):
        group.sort(key=lambda r: r["K"])
        ax.plot([r["K"] for r in group], [100 * r["utilization"] for r in group], marker="o",
                label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("reduction length K")
    ax.set_ylabel("MAC utilization %")
    ax.set_ylim(0, 100)
    ax.set_title("Systolic array: utilization per tile shape (fill and drain included)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    _save(fig, path)


def board_resources(path, reports) -> None:
    """Share of each board's device used, per resource kind (above 100 %: does not fit)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    kinds = ["logic", "ff", "dsp", "bram"]
    width = 0.8 / len(reports)
    for i, r in enumerate(reports):
        values = [100 * r["resources"][k][0] / r["resources"][k][1]
                  if r["resources"].get(k) else 0 for k in kinds]
        ax.bar([k + i * width for k in range(len(kinds))], values, width,
               label=f"{r['board']} ({r['config']['name']})")
    ax.axhline(100, color="tab:red", linestyle="--")
    ax.set_xticks([k + width * (len(reports) - 1) / 2 for k in range(len(kinds))], kinds)
    ax.set_ylabel("% of the device")
    ax.set_title("Resources per board (above 100 %: does not fit)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def family_resources(path, by_family) -> None:
    """Out-of-context builds, one panel per FPGA family: share of the device's logic and
    multipliers per design, fmax written above the bars."""
    plt = _plt()
    families = sorted(by_family)
    fig, axes = plt.subplots(1, len(families), figsize=(5.5 * len(families), 3.8),
                             squeeze=False)
    for ax, family in zip(axes[0], families):
        rows = by_family[family]
        xs = range(len(rows))
        logic = [100 * r["lut"] / r["lut_total"] if r.get("lut_total") else 0 for r in rows]
        dsp = [100 * r["dsp"] / r["dsp_total"] if r.get("dsp_total") else 0 for r in rows]
        ax.bar([x - 0.2 for x in xs], logic, 0.4, label="logic %", color="tab:blue")
        ax.bar([x + 0.2 for x in xs], dsp, 0.4, label="DSP %", color="tab:orange")
        for x, r, top in zip(xs, rows, map(max, logic, dsp)):
            text = f"{r['fmax_mhz']:.0f} MHz" if r.get("fmax_mhz") else "not routed"
            ax.annotate(text, (x, top), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=7)
        ax.set_xticks(list(xs), [r["name"] for r in rows], rotation=30, ha="right",
                      fontsize=7)
        if max(logic + dsp) > 100:
            ax.axhline(100, color="tab:red", linestyle="--")
        ax.set_ylabel("% of the device")
        ax.set_title(f"{family}: out-of-context builds", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    _save(fig, path)
