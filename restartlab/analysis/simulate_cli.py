"""`restartlab simulate`: its command line, tables and plot (the model is in simulate.py). The
main CLI hands the verb's arguments here, so numpy is imported only when the verb runs."""
import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Dict, List, Optional

from ..contracts import layout, usage
from . import simulate as sim
from . import simulate_ft as sim_ft
from .simulate import SimulateError
from ..contracts.units import parse_duration
from ..contracts.summary import Summary, SummaryError
from ..contracts.sim_result import SweepResult
from ..contracts.typed_json import to_dict


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _kv(text: str, what: str) -> Dict[str, float]:
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        k, sep, v = item.partition("=")
        try:
            out[k.strip()] = float(parse_duration(v)) if what == "seconds" else float(v)
        except ValueError:
            sep = ""
        if not sep or not k.strip() or out.get(k.strip(), 0) < 0:
            raise SimulateError(f"{item!r}: expected KIND={'SECONDS' if what == 'seconds' else 'WEIGHT'} (>= 0)")
    return out


def _ints(text: str, what: str) -> List[int]:
    try:
        xs = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SimulateError(f"{what}: {text!r}: expected comma-separated whole numbers") from None
    if not xs or min(xs) < 1:
        raise SimulateError(f"{what}: {text!r}: expected whole numbers >= 1")
    return xs


COST_FLAGS = (("step_time", "step_s", "one training step"),
              ("sync_stall", "sync_stall_s", "sync save: seconds the loop blocks"),
              ("async_stall", "async_stall_s", "async save: seconds the loop blocks (stage + drain)"),
              ("async_durable", "async_durable_s", "async save: save -> durable (.complete)"),
              ("restart", "restart_s", "launch -> first productive step"),
              ("gap", "gap_s", "attempt end -> next launch"))


def add_args(p):
    src = p.add_mutually_exclusive_group()
    src.add_argument("--from", dest="summary", metavar="SUMMARY_JSON",
                     help="measured costs: a report's summary (or its experiment directory)")
    src.add_argument("--replay", metavar="EXPT_DIR", help="simulate one finished phase with its own costs "
                     "and failure times, and compare with its measured ETTR (--phase)")
    p.add_argument("--phase", default="sync", help="--replay: the phase (default sync)")
    for flag, _, doc in COST_FLAGS:
        p.add_argument("--" + flag.replace("_", "-"), type=duration, help=doc + " (overrides --from)")
    p.add_argument("--interference", type=float, help="async: fractional slowdown of the steps that run "
                   "while a save is in the background (0.1 = 10%% slower)")
    p.add_argument("--detection", help="fault -> attempt end per kind, e.g. kill=0.2,hang=600")
    m = p.add_mutually_exclusive_group()
    m.add_argument("--mtbf", type=duration, help="the job's mean time between interruptions")
    m.add_argument("--node-mtbf", type=duration, help="one node's MTBF (with --nodes: the job's "
                   "MTBF shrinks with the node count)")
    p.add_argument("--nodes", help="node counts for --node-mtbf, e.g. 16,256,2048: a table over scale")
    p.add_argument("--kinds", help="mix of failure kinds by weight, e.g. kill=0.6,node=0.3,hang=0.1 (default kill)")
    p.add_argument("--correlated", type=float, default=0.0, help="fraction of interruptions that take "
                   "--burst nodes at once (fewer, larger interruptions for the same node failure rate)")
    p.add_argument("--burst", type=int, default=2, help="nodes per correlated interruption (default 2)")
    p.add_argument("--days", type=float, default=30.0, help="simulated wall-clock days (default 30)")
    p.add_argument("--replicas", type=int, default=20, help="independent runs (default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--intervals", help="save intervals in steps (default: 20 around Young's)")
    p.add_argument("--modes", default="sync,async", help="sync, async or both (default)")
    t = p.add_argument_group("torchft (simulate_ft.py): replica groups beside the restart strategy, same failures")
    t.add_argument("--torchft", action="store_true", help="also simulate torchft replica groups: costs from "
                   "--from's torchft phases, else the --ft-* flags")
    t.add_argument("--groups", type=int, help="torchft: replica groups (default: the measured phase's)")
    t.add_argument("--ft-stall", type=duration, help="torchft: the survivors' stall per failure")
    t.add_argument("--ft-rejoin", type=duration, help="torchft: the kill to the struck group's first commit")
    t.add_argument("--ft-step-overhead", type=float, help="torchft: its per-step quorum and commit as a "
                   "fraction of a step (default 0)")
    p.add_argument("--out", help="write simulate.json and simulate.png here (default: next to --from, else .)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def costs_from_args(a):
    if a.summary:
        path = layout.Expt(a.summary).summary if os.path.isdir(a.summary) else a.summary
        c = sim.costs_from_summary(path)
    else:
        if a.step_time is None:
            raise SimulateError("give measured costs (--from SUMMARY_JSON) or at least --step-time")
        c = sim.Costs(step_s=a.step_time)
    for flag, attr, _ in COST_FLAGS:
        v = getattr(a, flag)
        if v is not None:
            setattr(c, attr, v)
            c.sources[attr] = f"assumed (--{flag.replace('_', '-')})"
    if a.interference is not None:
        c.interference, c.sources["interference"] = a.interference, "assumed (--interference)"
    if a.detection:
        c.detection_s = dict(c.detection_s, **_kv(a.detection, "seconds"))
        c.sources["detection_s"] = "assumed (--detection)" + (" over measured" if a.summary else "")
    for attr in ("sync_stall_s", "async_stall_s", "async_durable_s", "interference", "restart_s", "gap_s"):
        c.sources.setdefault(attr, "assumed (0: not measured, not given)")
    if c.step_s <= 0:
        raise SimulateError(f"step time must be > 0 (got {c.step_s})")
    if not 0 <= c.interference < 10:
        raise SimulateError(f"--interference {c.interference}: expected a fraction >= 0")
    return c


def ft_costs_from_args(a) -> Optional[sim_ft.FtCosts]:
    """torchft's costs: the summary's torchft phases, each overridden by its flag; None without --torchft."""
    if not a.torchft:
        return None
    c = None
    if a.summary:
        path = layout.Expt(a.summary).summary if os.path.isdir(a.summary) else a.summary
        try:
            c = sim_ft.costs_from_summary(Summary.read(path))
        except SummaryError as e:
            raise SimulateError(str(e)) from None
    c = c or sim_ft.FtCosts(groups=0, stall_s=-1.0, rejoin_s=-1.0)
    for flag, attr in (("groups", "groups"), ("ft_stall", "stall_s"), ("ft_rejoin", "rejoin_s"),
                       ("ft_step_overhead", "step_overhead")):
        v = getattr(a, flag)
        if v is not None:
            setattr(c, attr, v)
            c.sources[attr] = f"assumed (--{flag.replace('_', '-')})"
    if c.groups < 2 or c.stall_s < 0 or c.rejoin_s < 0 or c.step_overhead < 0:
        raise SimulateError("--torchft needs measured torchft costs (--from a summary with a torchft phase that "
                            "had failures) or --groups N (>= 2) --ft-stall DURATION --ft-rejoin DURATION")
    return c


def failures_from_args(a, nodes: Optional[int] = None):
    kinds = _kv(a.kinds, "weight") if a.kinds else {"kill": 1.0}
    if not sum(kinds.values()) > 0:
        raise SimulateError("--kinds: the weights add up to 0")
    if not 0 <= a.correlated <= 1 or a.burst < 1:
        raise SimulateError("--correlated is a fraction in [0, 1] and --burst a node count >= 1")
    if a.mtbf:
        return sim.Failures(a.mtbf, kinds)
    if a.node_mtbf:
        return sim.Failures.at_scale(a.node_mtbf, nodes or 1, kinds, a.correlated, a.burst)
    raise SimulateError("give a failure model: --mtbf DURATION, or --node-mtbf DURATION --nodes N[,N...]")


def _fmt_s(x):
    if x is None:
        return "-"
    return f"{x / 3600:.2f} h" if x >= 3600 else f"{x / 60:.1f} min" if x >= 120 else f"{x:.2f} s"


def _num(x: Optional[float], spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def run_sweep(a, costs, nodes=None, ft_costs=None) -> SweepResult:
    fail = failures_from_args(a, nodes)
    modes = [m for m in (x.strip() for x in a.modes.split(",")) if m]
    bad = [m for m in modes if m not in ("sync", "async")]
    if bad or not modes:
        raise SimulateError(f"--modes {a.modes!r}: expected sync, async or sync,async")
    ivs = _ints(a.intervals, "--intervals") if a.intervals else sim.default_intervals(costs, fail)
    if a.days <= 0 or a.replicas < 2:
        raise SimulateError("--days must be > 0 and --replicas >= 2 (the confidence interval needs two)")
    res = sim.sweep(costs, fail, ivs, modes, a.days, a.replicas, a.seed)
    return SweepResult(nodes=nodes, mtbf_s=fail.mtbf_s, kinds=fail.kinds, modes=res,
                       torchft=sim_ft.simulate(ft_costs, fail.mtbf_s, a.days, a.replicas, a.seed)
                       if ft_costs is not None else None)


def print_sweep(r: SweepResult, costs):
    print(f"failure model: job MTBF {_fmt_s(r.mtbf_s)}"
          + (f" ({r.nodes} nodes)" if r.nodes else "") + f", kinds {r.kinds}")
    for mode, m in r.modes.items():
        print(f"\n{mode}: save stall {_fmt_s(costs.save_cost(mode))}; Young {_fmt_s(m.young_s)}, "
              f"Daly {_fmt_s(m.daly_s)}; best simulated {m.best.interval_steps} steps "
              f"({_fmt_s(m.best.interval_s)}) ETTR {m.best.ettr:.4f} +- {m.best.ci95:.4f}")
        print(f"  {'interval':>10} {'seconds':>10} {'ETTR':>8} {'+-95%':>7} {'fail/day':>9} {'lost h/day':>10} "
              f"{'down h/day':>10}")
        for row in m.rows:
            mark = " <- best" if row is m.best else ""
            print(f"  {row.interval_steps:>10} {row.interval_s:>10.1f} {row.ettr:>8.4f} {row.ci95:>7.4f} "
                  f"{row.failures_per_day:>9.2f} {row.lost_h_per_day:>10.3f} {row.downtime_h_per_day:>10.3f}{mark}")


def print_torchft(r: SweepResult):
    ft = r.torchft
    if not ft:
        return
    best = max((m.best.ettr, mode) for mode, m in r.modes.items())
    print(f"\ntorchft, {ft.groups} replica groups, the same failures: goodput {ft.goodput:.4f} +- {ft.ci95:.4f} "
          f"(first order {ft.analytic:.4f}); every group lost at once {ft.all_groups_lost_per_run:.2f} time(s) "
          f"per run; restart's best ({best[1]}) ETTR {best[0]:.4f}")


def plot(results: List[SweepResult], path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        for mode, m in r.modes.items():
            x = [row.interval_s for row in m.rows]
            y = [row.ettr for row in m.rows]
            label = f"{mode}" + (f", {r.nodes} nodes" if r.nodes else "")
            line, = ax.plot(x, y, marker=".", label=label, linestyle="-" if mode == "sync" else "--")
            if m.young_s:
                ax.axvline(m.young_s, color=line.get_color(), linestyle=":", linewidth=1)
            ax.plot([m.best.interval_s], [m.best.ettr], "o", color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("seconds of training between checkpoints (dotted: Young's interval; dot: simulated best)")
    ax.set_ylabel("ETTR (useful compute / wall)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser():
    p = argparse.ArgumentParser(prog="restartlab simulate", description=sim.__doc__.split("\n\n")[0],
                                epilog=usage.epilog("simulate"), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(p)
    return p


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    try:
        if a.replay:
            rep = sim.replay(a.replay, a.phase)
            if a.json:
                print(json.dumps(to_dict(rep), indent=1))
            else:
                print(f"replay of {a.replay} phase {rep.phase} ({rep.mode}, a save every {rep.interval_steps} "
                      f"steps, {rep.steps} steps, {rep.failures} failure(s) at their measured times):")
                print(f"  measured  ETTR {_num(rep.measured_ettr, '.4f')} (wall {_num(rep.measured_wall_s, '.1f')} s)")
                print(f"  simulated ETTR {rep.simulated_ettr:.4f} (wall {rep.simulated_wall_s:.1f} s), "
                      f"relative error {_pct(rep.relative_error)}: each failure's own restart, gap, detection")
                print(f"  simulated ETTR {rep.median_ettr:.4f} (wall {rep.median_wall_s:.1f} s), "
                      f"relative error {_pct(rep.median_relative_error)}: the medians, as a forecast")
            return 0
        costs = costs_from_args(a)
        nodes = _ints(a.nodes, "--nodes") if a.nodes else [None]
        if a.nodes and not a.node_mtbf:
            raise SimulateError("--nodes needs --node-mtbf (a job MTBF does not change with the node count)")
        ft_costs = ft_costs_from_args(a)
        results = [run_sweep(a, costs, n, ft_costs) for n in nodes]
    except SimulateError as e:
        print(f"restartlab simulate: error: {e}", file=sys.stderr)
        return 2
    out = a.out or (os.path.dirname(os.path.abspath(a.summary if not os.path.isdir(a.summary or "")
                                                  else os.path.join(a.summary, "x"))) if a.summary else ".")
    doc = {"costs": asdict(costs), "days": a.days, "replicas": a.replicas, "seed": a.seed, "results": to_dict(results)}
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        print("costs (per save, per failure):")
        for k, v in asdict(costs).items():
            if k != "sources":
                print(f"  {k:>16}: {v}   [{costs.sources.get(k, 'default')}]")
        print(f"{a.replicas} replicas x {a.days:g} days, seed {a.seed}; +-95%: the Monte Carlo's confidence half-width")
        for r in results:
            print()
            print_sweep(r, costs)
            print_torchft(r)
        if len(results) > 1:
            print("\nscale:")
            print(f"  {'nodes':>7} {'job MTBF':>10} " + " ".join(
                f"{m + ' best':>18} {m + ' ETTR':>10} {m + ' Young':>12}" for m in results[0].modes))
            for r in results:
                cells = " ".join(f"{_fmt_s(m.best.interval_s):>18} {m.best.ettr:>10.4f} "
                                 f"{_fmt_s(m.young_s):>12}" for m in r.modes.values())
                print(f"  {r.nodes:>7} {_fmt_s(r.mtbf_s):>10} {cells}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "simulate.json"), "w") as f:
        json.dump(doc, f, indent=1)
    if not a.no_plot:
        plot(results, os.path.join(out, "simulate.png"))
    if not a.json:
        print(f"\nwrote {os.path.join(out, 'simulate.json')}" + ("" if a.no_plot else " and simulate.png"))
    return 0
