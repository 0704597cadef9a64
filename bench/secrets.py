"""Benchmark the Safe-tier secret detector: accuracy on held-out cases, throughput on docs.

For the detector (the rules of rag_assets/privacy/secrets/rules.toml; detect-secrets is no
longer used: its Artifactory and Discord plugins are ported into the table) it prints

* recall on the ``flag`` cases (a case counts as detected when the redacted text no
  longer contains its ``secret``) and the false-positive rate on the ``clean`` cases
  (any finding at all in a clean text);
* the misses per kind and the false positives, as masked previews (the raw secret is
  never printed);
* what the detector does on each contested case (reported, not scored);
* the throughput of ``detector.redact`` in MB/s over every ``.md`` file of the Hugo
  docs (files read into memory first, median of 3 runs), with the number of findings
  and the most frequent kinds and rules (in docs these are mostly false positives,
  so they are worth reading: ``--show N`` prints N masked examples per mode).

Usage: ``.venv/bin/python bench/secrets.py [--cases F] [--contested F] [--corpus DIR] [--show N]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's directory comes first on sys.path, where "secrets.py" would
# shadow the standard library's secrets module for any library that imports it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

from rag_assets.privacy.secrets import SecretDetector, SecretFinding, masked_preview  # noqa: E402

CORPORA = REPO_ROOT.parent / "shared" / "corpora"

# One mode since detect-secrets was dropped; the loop stays for detectors built otherwise.
MODES: dict[str, dict] = {
    "default": {},
}


def load_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def expected_finding(case: dict) -> SecretFinding | None:
    """The labelled secret as a finding, to preview a miss without printing it."""
    start = case["text"].find(case["secret"])
    if start < 0:
        return None
    return SecretFinding(case["kind"], start, start + len(case["secret"]), "expected")


def one_line(s: str, limit: int = 160) -> str:
    return s if len(s) <= limit else s[: limit - 1] + "\u2026"


def score(detector: SecretDetector, cases: list[dict]) -> dict:
    flags = [c for c in cases if c["expect"] == "flag"]
    cleans = [c for c in cases if c["expect"] == "clean"]
    misses: dict[str, list[str]] = defaultdict(list)
    for c in flags:
        redacted = detector.redact(c["text"]).text
        if c["secret"] in redacted:
            f = expected_finding(c)
            misses[c["kind"]].append(masked_preview(c["text"], f) if f else "(secret not in text)")
    fps: list[tuple[str, str, str]] = []
    for c in cleans:
        for f in detector.find(c["text"]):
            fps.append((c["kind"], f"{f.kind} via {f.rule}", masked_preview(c["text"], f)))
    fp_cases = len({id(c) for c in cleans if detector.find(c["text"])})
    return {
        "flags": len(flags),
        "detected": len(flags) - sum(len(v) for v in misses.values()),
        "cleans": len(cleans),
        "fp_cases": fp_cases,
        "misses": misses,
        "fps": fps,
    }


def contested_outcomes(detector: SecretDetector, cases: list[dict]) -> list[str]:
    """Redacted (a finding covers an occurrence of the labelled value) or left clean, per case."""
    lines = []
    for c in cases:
        text, secret = c["text"], c.get("secret")
        findings = detector.find(text)
        starts = [i for i in range(len(text)) if secret and text.startswith(secret, i)]
        covered = any(f.start <= i and i + len(secret) <= f.end for i in starts for f in findings)
        outcome = "redacted" if covered else ("other hit" if findings else "clean")
        kinds = ",".join(sorted({f.kind for f in findings})) or "-"
        f = expected_finding(c) if secret else None
        preview = masked_preview(text, f, context=16) if f else ""
        lines.append(f"    [{outcome:9}] {c['kind']:<22} kinds={kinds:<22} {one_line(preview, 60):<60}")
        lines.append(f"        why: {one_line(c.get('why', ''), 150)}")
    return lines


def throughput(detector: SecretDetector, texts: list[str], runs: int = 3) -> tuple[float, int, Counter, Counter, list]:
    total_bytes = sum(len(t.encode("utf-8")) for t in texts)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for t in texts:
            detector.redact(t)
        times.append(time.perf_counter() - t0)
    kinds: Counter = Counter()
    rules: Counter = Counter()
    examples = []
    n = 0
    for t in texts:
        for f in detector.find(t):
            n += 1
            kinds[f.kind] += 1
            rules[f.rule] += 1
            examples.append((f.rule, masked_preview(t, f, context=40)))
    return total_bytes / 1e6 / statistics.median(times), n, kinds, rules, examples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=CORPORA / "secrets" / "cases.jsonl")
    parser.add_argument("--contested", type=Path, default=CORPORA / "secrets" / "contested.jsonl")
    parser.add_argument("--corpus", type=Path, default=CORPORA / "hugo-docs", help="Markdown tree to time")
    parser.add_argument("--show", type=int, default=0, help="masked examples of hugo-docs findings to print per mode")
    parser.add_argument("--modes", nargs="*", choices=list(MODES), default=list(MODES))
    args = parser.parse_args()

    cases = load_jsonl(args.cases)
    contested = load_jsonl(args.contested) if args.contested.is_file() else []
    md_files = sorted(args.corpus.rglob("*.md")) if args.corpus.is_dir() else []
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in md_files]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(f"cases: {args.cases} ({len(cases)}), contested: {len(contested)}, "
          f"throughput corpus: {args.corpus} ({len(md_files)} .md files, {mb:.1f} MB)")

    summary = []
    for mode in args.modes:
        t0 = time.perf_counter()
        detector = SecretDetector(**MODES[mode])
        build_ms = (time.perf_counter() - t0) * 1000
        print(f"\n=== {mode} (built in {build_ms:.0f} ms) ===")
        r = score(detector, cases)
        recall = r["detected"] / r["flags"] if r["flags"] else float("nan")
        fp_rate = r["fp_cases"] / r["cleans"] if r["cleans"] else float("nan")
        print(f"  recall   {recall:.3f}  ({r['detected']}/{r['flags']} flag cases)")
        print(f"  FP rate  {fp_rate:.3f}  ({r['fp_cases']}/{r['cleans']} clean cases)")
        if r["misses"]:
            print("  misses by kind:")
            for kind, previews in sorted(r["misses"].items(), key=lambda kv: (-len(kv[1]), kv[0])):
                print(f"    {kind:<34} {len(previews)}")
                for p in previews:
                    print(f"        {one_line(p)}")
        if r["fps"]:
            print("  false positives (case kind | finding):")
            for case_kind, finding, preview in r["fps"]:
                print(f"    {case_kind:<24} {finding:<60} {one_line(preview, 100)}")
        if contested:
            print("  contested cases (reported, not scored):")
            print("\n".join(contested_outcomes(detector, contested)))
        if texts:
            mbps, n, kinds, rules, examples = throughput(detector, texts)
            print(f"  throughput  {mbps:.1f} MB/s (redact, median of 3) on {args.corpus.name}; "
                  f"{n} findings")
            print("  top kinds: " + ", ".join(f"{k}={v}" for k, v in kinds.most_common(10)))
            print("  top rules: " + ", ".join(f"{k}={v}" for k, v in rules.most_common(10)))
            for rule, preview in examples[: args.show]:
                print(f"      {rule:<40} {one_line(preview, 140)}")
        else:
            mbps, n = float("nan"), 0
        summary.append((mode, recall, fp_rate, mbps, n))

    print("\n=== summary ===")
    print(f"  {'mode':<26} {'recall':>7} {'FP rate':>8} {'MB/s':>7} {'hugo findings':>14}")
    for mode, recall, fp_rate, mbps, n in summary:
        print(f"  {mode:<26} {recall:7.3f} {fp_rate:8.3f} {mbps:7.1f} {n:14d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
