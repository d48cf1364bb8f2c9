"""What ``python -m bench profile`` reads and writes without a profiler: the metrics it asks ncu for, ncu's raw
CSV parsed into per-launch records, per-invocation totals, the instruction-issue floor and profile_summary.md.
"""

from __future__ import annotations

import csv
import io

#: What each metric is for (summary column order follows this tuple).
METRICS = (
    ("gpu__time_duration.sum", "kernel duration under the profiler (ns)"),
    ("dram__bytes_read.sum", "DRAM bytes read"),
    ("dram__bytes_write.sum", "DRAM bytes written"),
    ("lts__t_bytes.sum", "L2 bytes accessed (all requests)"),
    ("lts__t_sectors_srcunit_tex_op_read.sum", "L2 sectors read by L1/TEX"),
    ("lts__t_sectors_srcunit_tex_op_write.sum", "L2 sectors written by L1/TEX"),
    ("lts__t_sector_hit_rate.pct", "L2 sector hit rate (%)"),
    ("launch__registers_per_thread", "registers per thread"),
    ("launch__shared_mem_per_block_static", "static shared memory per block (bytes)"),
    ("launch__shared_mem_per_block_dynamic", "dynamic shared memory per block (bytes)"),
    ("smsp__sass_inst_executed_op_local_ld.sum", "local-memory load instructions executed"),
    ("smsp__sass_inst_executed_op_local_st.sum", "local-memory store instructions executed"),
    ("launch__grid_size", "blocks"),
    ("launch__block_size", "threads per block"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy (%)"),
    ("sm__maximum_warps_per_active_cycle_pct", "theoretical occupancy (%)"),
    ("smsp__inst_executed.sum", "warp instructions executed"),
    ("smsp__inst_executed_pipe_xu.sum", "warp instructions on the XU pipe (MUFU: ex2, rcp; 1/8 the FMA rate)"),
    ("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue slots busy while active (%)"),
    ("sm__cycles_elapsed.avg", "SM cycles elapsed"),
)
#: Warp schedulers (SMSPs) per SM: each issues at most one warp instruction per cycle.
SCHEDULERS_PER_SM = 4
METRIC_NAMES = tuple(name for name, _ in METRICS)
#: Counters that add up over the launches of one invocation.
SUMMED_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
                  "smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum",
                  "smsp__inst_executed.sum", "smsp__inst_executed_pipe_xu.sum")

#: What each cache policy means for the counters (``--cache-control``).
CACHE_MEANING = {
    "all": ("cache-control all flushes all caches before each replay pass: each kernel starts with a cold L2, "
            "unlike the timed benchmark, which never flushes"),
    "none": ("cache-control none keeps the caches as the previous work left them, as in the timed benchmark, where "
             "one invocation follows another: a kernel may find in L2 what the kernel before it left there"),
}
#: What each replay mode means (``--replay-mode``).
REPLAY_MEANING = {
    "kernel": ("replay-mode kernel replays each kernel (restoring the memory it writes) until every metric is "
               "collected, so with cache-control none a later pass also finds what the earlier passes of the same "
               "kernel left in L2"),
    "application": ("replay-mode application reruns the whole driver once per pass, so every kernel is preceded by "
                    "exactly what precedes it in a run (with cache-control none: the L2 state of a timed run)"),
}


# ---------------------------------------------------------------- CSV (pure)

class NcuCsvError(ValueError):
    pass


def parse_number(text: str):
    """An ncu CSV cell as a number: thousands separators removed; None for '', 'n/a'."""
    text = (text or "").strip()
    if text in ("", "n/a", "N/A", "-"):
        return None
    cleaned = text.replace(",", "")
    try:
        value = float(cleaned)
    except ValueError:
        return text  # a string metric (kept as written)
    return int(value) if value.is_integer() and "." not in cleaned and "e" not in cleaned.lower() else value


def parse_ncu_raw_csv(text: str) -> list[dict]:
    """Rows of ``ncu --import X --csv --page raw``: one dict per profiled kernel launch.

    Format (ncu's raw page): a header row (ID, Process ID, Process Name, Host Name,
    Kernel Name, Context, Stream, Block Size, Grid Size, Device, CC, then one column per
    metric), a units row (empty for the identification columns), then one row per
    launch. Lines before the header (``==PROF==`` messages) are skipped. Returns
    ``{"id", "kernel", "block", "grid", "stream", "metrics": {name: {"value", "unit"}}}``.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID","Process ID"')), None)
    if start is None:
        raise NcuCsvError("no ncu raw-page header (a line starting with \"ID\",\"Process ID\") in the CSV")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    if "Kernel Name" not in header:
        raise NcuCsvError(f"ncu CSV header has no 'Kernel Name' column: {header[:12]}")
    body = [r for r in rows[1:] if r and not r[0].startswith("==")]
    units = None
    if body and body[0][0] == "":
        units, body = body[0], body[1:]
    ident = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
             "Grid Size", "Device", "CC"}
    launches = []
    for row in body:
        if len(row) != len(header):
            raise NcuCsvError(f"ncu CSV row has {len(row)} cells, header has {len(header)}: {row[:5]}")
        cells = dict(zip(header, row, strict=True))
        metrics = {}
        for index, name in enumerate(header):
            if name in ident:
                continue
            metrics[name] = {"value": parse_number(row[index]), "unit": units[index] if units else ""}
        launches.append({"id": int(cells["ID"]), "kernel": cells["Kernel Name"], "block": cells.get("Block Size"),
                         "grid": cells.get("Grid Size"), "stream": cells.get("Stream"), "metrics": metrics})
    return launches


#: ncu unit spellings -> (base unit, factor). ``--print-units base`` should give the base units
#: already; scaled spellings (a CSV exported without it) are converted rather than misread.
UNIT_SCALE = {
    "byte": ("byte", 1), "Kbyte": ("byte", 1e3), "Mbyte": ("byte", 1e6), "Gbyte": ("byte", 1e9),
    "Tbyte": ("byte", 1e12),
    "sector": ("sector", 1), "Ksector": ("sector", 1e3), "Msector": ("sector", 1e6), "Gsector": ("sector", 1e9),
    "nsecond": ("nsecond", 1), "usecond": ("nsecond", 1e3), "msecond": ("nsecond", 1e6),
    "second": ("nsecond", 1e9),
    # ncu 2025.3 (the H200 image) spells time units short in --print-units base CSVs
    "ns": ("nsecond", 1), "us": ("nsecond", 1e3), "ms": ("nsecond", 1e6), "s": ("nsecond", 1e9),
}
#: The base unit each metric must arrive in (after scaling); a different unit is an error, not a guess.
EXPECTED_UNITS = {"gpu__time_duration.sum": "nsecond", "dram__bytes_read.sum": "byte",
                  "dram__bytes_write.sum": "byte", "lts__t_bytes.sum": "byte",
                  "lts__t_sectors_srcunit_tex_op_read.sum": "sector",
                  "lts__t_sectors_srcunit_tex_op_write.sum": "sector"}


def metric_value(launch: dict, name: str):
    """A metric of one launch in its base unit (bytes, sectors, nanoseconds); None if absent."""
    entry = launch["metrics"].get(name)
    if entry is None or entry["value"] is None:
        return None
    value, unit = entry["value"], entry.get("unit") or ""
    if unit in UNIT_SCALE and isinstance(value, (int, float)):
        unit, factor = UNIT_SCALE[unit][0], UNIT_SCALE[unit][1]
        value = value * factor if factor != 1 else value
    expected = EXPECTED_UNITS.get(name)
    if expected is not None and unit and unit != expected:
        raise NcuCsvError(f"{name} arrived in unit {entry.get('unit')!r}; expected {expected!r}")
    return value


def per_invocation(launches: list[dict], repeat: int) -> dict:
    """Counters summed over every profiled launch, divided by the profiled invocations."""
    totals = {}
    for name in SUMMED_METRICS:
        values = [metric_value(launch, name) for launch in launches]
        numbers = [v for v in values if isinstance(v, (int, float))]
        totals[name] = (sum(numbers) / repeat) if numbers and len(numbers) == len(values) else None
    totals["launches"] = len(launches) / repeat
    return totals


def issue_floor_ns(launch: dict, sm_count):
    """The time one launch would take if it did nothing but issue its warp instructions, one per
    cycle on every warp scheduler of every SM, at the clock it ran: its duration x (instructions /
    (4 x SMs)) / its elapsed cycles. None if a counter is missing."""
    inst, cycles, duration = (metric_value(launch, name) for name in
                              ("smsp__inst_executed.sum", "sm__cycles_elapsed.avg", "gpu__time_duration.sum"))
    if not (sm_count and isinstance(inst, (int, float)) and cycles and duration):
        return None
    return duration * (inst / (SCHEDULERS_PER_SM * sm_count)) / cycles


def issue_table(results, sm_count) -> list[str]:
    """Per invocation: warp instructions, MUFU share, and the issue floor next to the kernel time."""
    lines = ["## Instruction issue (per invocation)", "",
             "The issue floor is the time the launches would take issuing their warp instructions at one per "
             "cycle on every scheduler (4 per SM) at the clock they ran, with nothing else in the way: a variant "
             "cannot run faster than it, whatever its scheduling.", "",
             "| case | variant | warp instructions | XU (MUFU) instructions | issue floor us | kernel time under "
             "profiler us | issue slots busy % (launch-weighted) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        launches = r.get("launches") or []
        if not launches:
            continue
        totals = per_invocation(launches, r["repeat"])
        floors = [issue_floor_ns(launch, sm_count) for launch in launches]
        floor = sum(floors) / r["repeat"] if floors and None not in floors else None
        busy = [(metric_value(launch, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
                 metric_value(launch, "gpu__time_duration.sum")) for launch in launches]
        weighted = None
        if busy and all(isinstance(b, (int, float)) and d for b, d in busy):
            weighted = sum(b * d for b, d in busy) / sum(d for _, d in busy)
        duration = totals["gpu__time_duration.sum"]
        lines.append(f"| {r['case']} | {r['variant']} | {_fmt(totals['smsp__inst_executed.sum'])} | "
                     f"{_fmt(totals['smsp__inst_executed_pipe_xu.sum'])} | "
                     f"{_fmt(None if floor is None else floor / 1e3, 1)} | "
                     f"{_fmt(None if duration is None else duration / 1e3, 1)} | {_fmt(weighted, 1)} |")
    return lines + [""]


def short_kernel_name(name: str) -> str:
    """``numba_softmax::kernels::fused_row::fused_row_softmax[abi:...](Array<...>)`` -> ``fused_row_softmax``."""
    base = name.split("(", 1)[0]
    base = base.split("[abi", 1)[0]
    base = base.rsplit("::", 1)[-1] if "<" not in base else base
    return base.strip() or name


# ---------------------------------------------------------------- summary

def launch_count_warning(result: dict) -> str | None:
    """The profiled range must hold exactly repeat x (kernels per invocation) launches."""
    launches = result.get("launches")
    if launches is None:
        return None
    repeat = result["repeat"]
    kernels = len((result.get("driver") or {}).get("kernel_resources") or [])
    name = f"{result['case']} {result['variant']}"
    if kernels and len(launches) != repeat * kernels:
        return (f"{name}: {len(launches)} kernel launches profiled, expected {repeat} invocations x {kernels} "
                "kernels; the per-invocation figures are not trustworthy")
    if len(launches) % repeat:
        return (f"{name}: {len(launches)} kernel launches profiled is not a multiple of the {repeat} invocations; "
                "the per-invocation figures are not trustworthy")
    return None


def _fmt(value, digits=0) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:,.{digits}f}"


def summary_markdown(info: dict, results: list[dict], nsys_results: list[dict]) -> str:
    lines = ["# Profile summary", "",
             f"Experiment {info['experiment']}; profiler runs separate from any timing. "
             "Counters are reported as ncu read them, next to the logical bytes of one invocation "
             "(input read once + output written once); neither is converted into the other.", "",
             "Policy: " + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in info["policy"].items()
                                    if k in ("replay_mode", "cache_control", "clock_control")) + ". "
             + info["policy"]["meaning"] + ".", "",
             f"ncu: `{info.get('ncu') or 'NOT FOUND'}` ({' '.join(info.get('ncu_version', '-').split())})", ""]
    if info.get("metrics_unknown_to_this_ncu"):
        lines += [f"> **This ncu does not know {info['metrics_unknown_to_this_ncu']}: those metrics were dropped "
                  "(the failed attempt's output is kept as `*.ncu.attempt1.*.txt`).**", ""]
    if info.get("ncu_error"):
        lines += [f"> **NO NSIGHT COMPUTE CAPTURE: {info['ncu_error']}.**", ""]
    device = next(((r.get("driver") or {}).get("device") for r in results if (r.get("driver") or {}).get("device")),
                  None)
    if device:
        lines += [f"Device: {device.get('name')} ({device.get('sm_count')} SMs, L2 {device.get('l2_cache_bytes')} "
                  f"bytes, driver {device.get('driver_version')}).", ""]
    failures = [r for r in results if r.get("error")]
    if failures:
        lines += [f"> **{len(failures)} profile run(s) FAILED; their profiler output is kept and quoted below.**", ""]
    lines += ["## Per invocation (summed over its kernel launches, divided by the profiled invocations)", "",
              "| case | variant | launches | logical bytes | DRAM read B | DRAM read / input | DRAM write B | "
              "L2 bytes (lts__t_bytes) | local ld/st instr | kernel time under profiler us | output check |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("launches") is None:
            continue
        totals = per_invocation(r["launches"], r["repeat"])
        duration = totals["gpu__time_duration.sum"]
        local = (totals["smsp__sass_inst_executed_op_local_ld.sum"], totals["smsp__sass_inst_executed_op_local_st.sum"])
        check = (r.get("driver") or {}).get("check", {}).get("passed")
        logical = (r.get("driver") or {}).get("bytes_moved_logical")
        read = totals["dram__bytes_read.sum"]
        # logical bytes = input read once + output written once, the two the same size
        read_ratio = f"{read / (logical / 2):.2f}x" if read is not None and logical else "-"
        lines.append(f"| {r['case']} | {r['variant']} | {_fmt(totals['launches'], 1)} | "
                     f"{_fmt(logical)} | {_fmt(read)} | {read_ratio} | {_fmt(totals['dram__bytes_write.sum'])} | "
                     f"{_fmt(totals['lts__t_bytes.sum'])} | {_fmt(local[0])} / {_fmt(local[1])} | "
                     f"{_fmt(None if duration is None else duration / 1e3, 1)} | "
                     f"{'passed' if check else ('FAILED' if check is False else '-')} |")
    warnings = [w for r in results if (w := launch_count_warning(r))]
    if warnings:
        lines += [""] + [f"> **WARNING: {w}**" for w in warnings]
    lines += [""] + issue_table(results, (device or {}).get("sm_count"))
    lines += ["## Per kernel launch", "",
              "| case | variant | id | kernel | grid x block | regs/thread | static / dynamic smem B | "
              "achieved / theoretical occupancy % | DRAM read B | DRAM write B | L2 hit % |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for launch in r.get("launches") or []:
            m = lambda name, launch=launch: metric_value(launch, name)  # noqa: E731
            lines.append(
                f"| {r['case']} | {r['variant']} | {launch['id']} | `{short_kernel_name(launch['kernel'])}` | "
                f"{_fmt(m('launch__grid_size'))} x {_fmt(m('launch__block_size'))} | "
                f"{_fmt(m('launch__registers_per_thread'))} | {_fmt(m('launch__shared_mem_per_block_static'))} / "
                f"{_fmt(m('launch__shared_mem_per_block_dynamic'))} | "
                f"{_fmt(m('sm__warps_active.avg.pct_of_peak_sustained_active'), 1)} / "
                f"{_fmt(m('sm__maximum_warps_per_active_cycle_pct'), 1)} | {_fmt(m('dram__bytes_read.sum'))} | "
                f"{_fmt(m('dram__bytes_write.sum'))} | {_fmt(m('lts__t_sector_hit_rate.pct'), 1)} |")
    if failures:
        lines += ["", "## Failed profile runs", ""]
        for r in failures:
            lines += [f"### {r['experiment']} {r['case']} {r['variant']}", "", r["error"], "",
                      "Command: `" + " ".join(r["profile_run"]["command"]) + "`", "", "stderr (last lines):", "",
                      "```", info["tails"].get(f"{r['experiment']}_{r['case']}_{r['variant']}", ""), "```", ""]
    lines += ["", "## Nsight Systems", ""]
    if info.get("nsys") is None:
        lines += [f"NOT RUN: {info['nsys_reason']}", ""]
    for r in nsys_results:
        status = r.get("error") or f"report {r.get('report')} (exit {r['profile_run']['returncode']})"
        lines += [f"* {r['experiment']} {r['case']} {r['variant']} graph mode, `--cuda-graph-trace=node`: {status}"]
    lines += ["", "Files: `ncu/<exp>_<case>_<variant>.ncu-rep` (raw report), `.csv` (raw-page export), "
              "`.ncu.stderr.txt` / `.ncu.stdout.txt` (profiler output), `.driver.json` (the driver's record: "
              "device, kernel resources from the driver, output check); `profile.jsonl` (one record per launch); "
              "`profile.json` (commands, policy, tool versions)."]
    return "\n".join(lines) + "\n"
