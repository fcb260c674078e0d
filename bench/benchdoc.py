"""Shared by the bench/*/run.py drivers: rewrites one generated section of
docs/benchmarks.md. A section is everything between its markers
"<!-- BEGIN NAME ..." and "<!-- END NAME -->"; a missing section is appended.
Figures are never edited by hand: each driver renders its whole section."""
import datetime
import json
import os
import platform
import signal

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO, "docs", "benchmarks.md")


def update_docs(section, name, path=DOC):
    """Replaces section NAME of `path` with `section` (which carries its own markers)."""
    begin, end = f"<!-- BEGIN {name} ", f"<!-- END {name} -->"
    if not section.startswith(begin) or not section.rstrip().endswith(end):
        raise ValueError(f"section {name}: must start with '{begin}' and end with '{end}'")
    with open(path) as f:
        text = f.read()
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        new = head + section.rstrip() + tail
    else:
        sep = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        new = text + sep + section + "\n"
    with open(path, "w") as f:
        f.write(new)
    print(f"bench: updated {path}")


def load_results(directory):
    """An earlier run's DIR/results.json (for --from-results)."""
    with open(os.path.join(directory, "results.json")) as f:
        return json.load(f)


def save_results(res, directory):
    """Writes DIR/results.json (DIR created if missing) and says where."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "results.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    print(f"bench: results in {path}")


def machine():
    """The machine a benchmark ran on: CPU model, cores, memory, kernel, load, date."""
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return {"cpu": cpu, "nproc": os.cpu_count(), "mem_gib": round(mem_gib, 1),
            "kernel": platform.release(), "loadavg_before": " ".join(load),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def publish(section, name, write):
    """Prints a rendered section and, if `write`, puts it into docs/benchmarks.md."""
    print(section)
    if write:
        update_docs(section, name)


def env_tagged_pids(tag, value, live_only=False):
    """Pids of the other processes whose environment holds tag=value (a benchmark's
    processes, including daemons that left its process groups); `live_only` leaves
    zombies out."""
    want, me, out = f"{tag}={value}".encode(), os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            if live_only:
                with open(f"/proc/{pid}/stat") as s:
                    if s.read().split(")")[-1].split()[0] == "Z":
                        continue
            out.append(int(pid))
        except OSError:
            pass
    return out


def kill_env_tagged(tag, value):
    """SIGKILLs every other process whose environment holds tag=value."""
    for pid in env_tagged_pids(tag, value):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
