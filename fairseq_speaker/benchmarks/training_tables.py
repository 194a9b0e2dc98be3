"""The tables of ``fairseq-speaker-benchmark`` (:mod:`fairseq_speaker.benchmarks.training`): each configuration's runs
summarized (the median and spread of its figures, its ratios to stock fairseq, to the speaker-agnostic model of the
same network and to ``--versus``, each the median of the ratios within a round: :func:`summarize`,
:func:`paired_ratio`) and printed (:func:`format_tables`). Its siblings:
:mod:`~fairseq_speaker.benchmarks.training_configs` (the configurations) and
:mod:`~fairseq_speaker.benchmarks.training_workers` (the runs that measure them).
"""

import statistics
from typing import Dict, List, Optional

from fairseq_speaker.benchmarks.training_configs import PLAIN, STOCK, reference_of


def label(spec: Dict) -> str:
    """The configuration's name in the tables: ``<config>:plain`` for a --plain run."""
    return spec["config"] + (PLAIN if spec.get("plain") else "")


def _median(values: List[float]) -> float:
    return statistics.median(values) if values else float("nan")


def paired_ratio(values: List[Optional[float]], reference: List[Optional[float]]) -> Optional[float]:
    """The median over rounds of ``values[r] / reference[r]``: each round runs every configuration once, one
    after the other, so that a ratio within a round cancels the machine's slow drifts; rounds where either
    run failed are left out (None when none is left)."""
    ratios = [v / ref for v, ref in zip(values, reference) if v is not None and ref]
    return statistics.median(ratios) if ratios else None


def summarize(specs: List[Dict], results: List[List[Dict]], peak: List[float], args) -> List[Dict]:
    rows = []
    for spec, runs in zip(specs, results):
        ok = [r for r in runs if "error" not in r]
        row = {"mode": spec["mode"], "config": label(spec), "speakers": spec["speakers"], "runs": ok,
               "errors": [r["error"] for r in runs if "error" in r]}
        key = "tokens_per_second" if spec["mode"] == "train" else "sentences_per_second"
        values = [r[key] for r in ok]
        row["by_round"] = [r.get(key) for r in runs]  # None for a failed run: rounds stay aligned
        row.update(median=_median(values), low=min(values, default=float("nan")),
                   high=max(values, default=float("nan")))
        if spec["mode"] == "train" and ok:
            row["update_seconds"] = _median([r["update_seconds"] for r in ok])
            row["flop_per_token"] = _median([r["flop_per_token"] for r in ok])
            row["peak_fraction"] = row["median"] * row["flop_per_token"] / _median(peak) if peak else None
        row["max_rss_bytes"] = max((r["max_rss_bytes"] for r in ok), default=None)
        rows.append(row)
    by_name = {(r["mode"], r["config"], r["speakers"]): r for r in rows}
    for row in rows:
        stock = next((r for r in rows if r["mode"] == row["mode"] and r["config"].startswith(STOCK)), None)
        base = by_name.get((row["mode"], reference_of(row["config"]), row["speakers"]))
        row["vs_stock"] = paired_ratio(row["by_round"], stock["by_round"]) if stock else None
        row["vs_base"] = paired_ratio(row["by_round"], base["by_round"]) if base else None
        if getattr(args, "versus", None):  # the same speakers, or the one run of a stock model
            versus = by_name.get((row["mode"], args.versus, row["speakers"])) or next(
                (r for r in rows if r["mode"] == row["mode"] and r["config"] == args.versus), None)
            row["vs_versus"] = paired_ratio(row["by_round"], versus["by_round"]) if versus else None
    return rows


def format_tables(rows: List[Dict], peak: List[float], args) -> str:
    lines = []
    device = "CUDA" if args.gpu else f"CPU, {args.threads} thread(s)"
    e, h, a = args.sizes
    lines.append(f"{device}; sizes {e}-{h}-{a}; V = {args.vocab:,}; batches of {args.batch} sentences; "
                 f"median [min-max] of {args.repeats} "
                 + ("paired round(s): the configurations in one process, in turns" if args.paired
                    else "interleaved run(s)")
                 + "; the ratios are medians of each round's ratios")
    if peak:
        lines.append(f"machine's matrix-product rate (one sgemm): {_median(peak) / 1e9:.1f} GFLOP/s")
    for mode, unit in (("train", "tokens/s"), ("generate", "sentences/s")):
        part = [r for r in rows if r["mode"] == mode]
        if not part:
            continue
        lines.append("")
        lines.append("training, target tokens/s (words + </s>)" if mode == "train" else
                     f"generation, beam 5, {args.gen_len}-word hypotheses, sentences/s")
        width = max([24] + [len(r["config"]) + 2 for r in part])  # transformer_base:fact+hyper_lhuc fits
        header = f"  {'config':<{width}}{'speakers':>10}{unit:>13}{'spread':>20}{'vs stock':>10}{'vs base':>9}"
        versus = f"vs {args.versus}" if getattr(args, "versus", None) else ""
        header += f"{versus:>{len(versus) + 2}}" if versus else ""
        if mode == "train":
            header += f"{'ms/update':>11}{'MFLOP/tok':>11}{'of peak':>9}"
        lines.append(header + f"{'max RSS':>10}")
        for r in part:
            if r["errors"] and not r["runs"]:
                lines.append(f"  {r['config']:<{width}}{r['speakers']:>10,}  {r['errors'][0]}")
                continue
            ratios = [f"{r[key]:.2f}x" if r[key] is not None else "-" for key in ("vs_stock", "vs_base")]
            line = (f"  {r['config']:<{width}}{r['speakers']:>10,}{r['median']:>13,.1f}"
                    f"{'[' + format(r['low'], ',.1f') + '-' + format(r['high'], ',.1f') + ']':>20}"
                    f"{ratios[0]:>10}{ratios[1]:>9}")
            if versus:
                ratio = f"{r['vs_versus']:.2f}x" if r["vs_versus"] is not None else "-"
                line += f"{ratio:>{len(versus) + 2}}"
            if mode == "train":
                frac = f"{100 * r['peak_fraction']:.0f}%" if r.get("peak_fraction") else "-"
                line += f"{1000 * r['update_seconds']:>11.1f}{r['flop_per_token'] / 1e6:>11.1f}{frac:>9}"
            rss = f"{r['max_rss_bytes'] / 2 ** 30:.2f}G" if r["max_rss_bytes"] else "-"
            lines.append(line + f"{rss:>10}")
    return "\n".join(lines)
