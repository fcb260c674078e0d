"""Shared by the bench/*/run.py drivers: rewrites one generated section of
docs/benchmarks.md. A section is everything between its markers
"<!-- BEGIN NAME ..." and "<!-- END NAME -->"; a missing section is appended.
Figures are never edited by hand: each driver renders its whole section."""
import os

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
