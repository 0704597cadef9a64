"""Benchmark the Safe-tier secret detector: accuracy on held-out cases, throughput on docs.

For the detector (the rules of rag_assets/privacy/secrets/rules.toml; detect-secrets is no
longer used: its Artifactory and Discord plugins are ported into the table) it prints

* recall on the ``flag`` cases (a case counts as detected when the redacted text no
  longer contains its ``secret``) and the false-positive rate on the ``clean`` cases
  (any finding at all in a clean text);
* the misses per kind and the false positives, as masked previews (the raw secret is
  never printed);
* what the detector does on each contested case (reported, not scored);
* recall and false positives on the structured cases below (``STRUCTURED``): secrets named
  by a frontmatter key, a table's column header or row label, a definition term or a line
  label, and the same shapes without a secret (keyboard shortcuts under ``Key``, a
  tokenizer's ``token`` column, ``password_policy: strict``). These go through the Safe
  tier's own path, ``Sanitizer`` on the parsed note (frontmatter and body), not the
  detector on the raw text, where a frontmatter line reads like any YAML line;
* the throughput over every ``.md`` file of the Hugo docs (files read into memory first,
  median of 3 runs), of ``detector.redact`` alone and of the full ``Sanitizer`` with the
  repository's ``identity_map.json``, in MB per CPU-second (``time.process_time``: what
  the sanitiser costs, whatever else runs) and in MB per wall-clock second, with the load
  average before each run; and the number of findings and the most frequent kinds and
  rules (in docs these are mostly false positives, so they are worth reading: ``--show N``
  prints N masked examples per mode).

Usage: ``python bench/secret_detection.py [--cases F] [--contested F] [--corpus DIR] [--identity-map F] [--show N]``
(it was bench/secrets.py, which shadowed the standard library's ``secrets`` for any bench run from this folder).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's directory comes first on sys.path, where a bench module could
# shadow a library's module (bench/secrets.py once shadowed the standard library's `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

from rag_assets.ingest.parsing import split_frontmatter  # noqa: E402
from rag_assets.privacy.identity import IdentityMap  # noqa: E402
from rag_assets.privacy.sanitize import Sanitizer, SanitizeTally  # noqa: E402
from rag_assets.privacy.secrets import SecretDetector, SecretFinding, masked_preview  # noqa: E402

CORPORA = REPO_ROOT.parent / "shared" / "corpora"

# Secrets named by structure, not by the words right before them (issue 23): each is a whole
# note, sanitised as the Safe tier does it. "flag": ``secret`` must be gone from the sanitised
# body and frontmatter; "clean": nothing may be redacted.
STRUCTURED: list[dict] = [
    {
        "kind": "frontmatter_flat",
        "expect": "flag",
        "secret": "FmPassw0rdZeta71",
        "text": "---\ntitle: R\npassword: FmPassw0rdZeta71\n---\n# R\n",
    },
    {
        "kind": "frontmatter_flat",
        "expect": "flag",
        "secret": "Rk2Lm9Qx7Vb3Nw8Zp4Ty6Hc1Jd5Fg0Sa2Ue7Wo3i",
        "text": "---\naws_secret_access_key: Rk2Lm9Qx7Vb3Nw8Zp4Ty6Hc1Jd5Fg0Sa2Ue7Wo3i\n---\nbody\n",
    },
    {
        "kind": "frontmatter_flat",
        "expect": "flag",
        "secret": "FmS3cretValue884",
        "text": "---\napi_token: FmS3cretValue884\n---\nbody\n",
    },
    {
        "kind": "frontmatter_nested",
        "expect": "flag",
        "secret": "Db9xPassQ7wLm2",
        "text": "---\ndb:\n  host: db-main\n  password: Db9xPassQ7wLm2\n---\nbody\n",
    },
    {
        "kind": "frontmatter_nested",
        "expect": "flag",
        "secret": "Cr3dNasQ8xLm2Wv7Zt5Rk",
        "text": "---\ncredentials:\n  nas: Cr3dNasQ8xLm2Wv7Zt5Rk\n---\nbody\n",
    },
    {
        "kind": "frontmatter_list",
        "expect": "flag",
        "secret": "Lst7Pw0rdAlpha",
        "text": "---\npasswords:\n  - Lst7Pw0rdAlpha\n---\nbody\n",
    },
    {
        "kind": "frontmatter_list",
        "expect": "flag",
        "secret": "AccPw0rd55Kx",
        "text": "---\naccounts:\n  - user: admin\n    password: AccPw0rd55Kx\n---\nbody\n",
    },
    {
        "kind": "frontmatter_number",
        "expect": "flag",
        "secret": "48213907",
        "text": "---\nalarm:\n  pin: 48213907\n---\nbody\n",
    },
    {
        "kind": "table_header",
        "expect": "flag",
        "secret": "N4sP@ssw0rd!2024",
        "text": "# R\n\n| service | user | password |\n|---|---|---|\n| nas | admin | N4sP@ssw0rd!2024 |\n",
    },
    {
        "kind": "table_header",
        "expect": "flag",
        "secret": "Tk4Bn8Qm2Wx6Zr9Lp3Vc",
        "text": "| Service | Token |\n| --- | --- |\n| ci | Tk4Bn8Qm2Wx6Zr9Lp3Vc |\n",
    },
    {
        "kind": "table_header",
        "expect": "flag",
        "secret": "Sc7Hy2Nm5Qa9Xk3Wd6Rb",
        "text": "| name | Secret |\n|:--|:--:|\n| webhook | Sc7Hy2Nm5Qa9Xk3Wd6Rb |\n",
    },
    {
        "kind": "table_header",
        "expect": "flag",
        "secret": "Ak2Wn8Rt5Yq3Lm7Zp4Xd",
        "text": "| integration | API key |\n| --- | --- |\n| weather | `Ak2Wn8Rt5Yq3Lm7Zp4Xd` |\n",
    },
    {
        "kind": "table_row_label",
        "expect": "flag",
        "secret": "Rl9Kd3Mx7Vq2",
        "text": "| Field | Value |\n| --- | --- |\n| User | backup |\n| Password | Rl9Kd3Mx7Vq2 |\n",
    },
    {
        "kind": "definition_list",
        "expect": "flag",
        "secret": "Gw5Lp8Qz2Rk7",
        "text": "Guest network password\n: Gw5Lp8Qz2Rk7\n",
    },
    {
        "kind": "definition_list",
        "expect": "flag",
        "secret": "Ad3Tk9Vm6Xq2Wn8Lz4Pr",
        "text": "Admin token\n\n: Ad3Tk9Vm6Xq2Wn8Lz4Pr\n",
    },
    {"kind": "label_prose", "expect": "flag", "secret": "Pr7Dash9Wq2Lx", "text": "- Password \u2014 Pr7Dash9Wq2Lx\n"},
    {
        "kind": "label_prose",
        "expect": "flag",
        "secret": "Pr9Arrow4Jv6Nc",
        "text": "NAS password \u2192 Pr9Arrow4Jv6Nc\n",
    },
    {
        "kind": "label_prose",
        "expect": "flag",
        "secret": "Pr1Paren8Hs3Qd",
        "text": "Root password (nas): Pr1Paren8Hs3Qd\n",
    },
    {"kind": "label_prose", "expect": "flag", "secret": "Pr3Bold5Kw8Zu", "text": "**Password**: Pr3Bold5Kw8Zu\n"},
    {"kind": "dataview_field", "expect": "flag", "secret": "Dv1Field7Qk3Wz", "text": "password:: Dv1Field7Qk3Wz\n"},
    {
        "kind": "dataview_field",
        "expect": "flag",
        "secret": "Dv3Brack9Sn5Yu",
        "text": "The admin login is [api_token:: Dv3Brack9Sn5Yu] since May.\n",
    },
    {
        "kind": "html_table",
        "expect": "flag",
        "secret": "Ht1Head5Qm8Zx",
        "text": "<table>\n<tr><th>Service</th><th>Password</th></tr>\n<tr><td>nas</td><td><code>Ht1Head5Qm8Zx</code></td></tr>\n</table>\n",
    },
    {
        "kind": "frontmatter_clean",
        "expect": "clean",
        "text": "---\ntitle: Policy\npassword_policy: strict\npassword_min_length: 12\ntoken_budget: 4000\n"
        "keys:\n  save: Ctrl+S\npassword:\n  policy: strict\n  expiry: 90d\n---\nbody\n",
    },
    {
        "kind": "table_clean",
        "expect": "clean",
        "text": "| Key | Action |\n| --- | --- |\n| Ctrl+Shift+P | Command palette |\n| Cmd+K Cmd+S | Keyboard shortcuts |\n",
    },
    {
        "kind": "table_clean",
        "expect": "clean",
        "text": "| token | id |\n| --- | --- |\n| hello | 31373 |\n| ##ing | 278 |\n| [CLS] | 101 |\n| \u0120the | 262 |\n",
    },
    {
        "kind": "table_clean",
        "expect": "clean",
        "text": "| Setting | Type | Description |\n| --- | --- | --- |\n| password | string | The password used to connect |\n"
        "| token | string | An API token; see Settings |\n",
    },
    {"kind": "definition_clean", "expect": "clean", "text": "Password\n: at least 12 characters, one digit\n"},
    {
        "kind": "html_table_clean",
        "expect": "clean",
        "text": "<table><tr><th>Setting</th><th>Description</th></tr><tr><td>password</td><td>The password used to connect</td></tr>"
        "</table>\n<table><tr><th>Key</th><th>Action</th></tr><tr><td>Ctrl+Shift+P</td><td>palette</td></tr></table>\n",
    },
    {
        "kind": "dataview_clean",
        "expect": "clean",
        "text": "status:: active\n`checkPassword :: Text -> Bool` is the type of the check.\n",
    },
    {
        "kind": "label_clean",
        "expect": "clean",
        "text": "- Password \u2014 see the vault entry\n- Key \u2014 Ctrl+Alt+Delete\n- Token budget \u2192 4000\n",
    },
]


def sanitise_note(sanitizer: Sanitizer, text: str) -> tuple[str, SanitizeTally]:
    """The note's frontmatter (as JSON) and body after the Safe tier's sanitiser."""
    front, body = split_frontmatter(text)
    tally = SanitizeTally()
    clean_front = sanitizer.value(front, tally)
    return json.dumps(clean_front, ensure_ascii=False) + "\n" + sanitizer.text(body, tally), tally


def score_structured(sanitizer: Sanitizer, cases: list[dict]) -> dict:
    """Recall and false positives of the structured cases, through the sanitiser."""
    misses: dict[str, list[str]] = defaultdict(list)
    fps: list[tuple[str, str]] = []
    flags = [c for c in cases if c["expect"] == "flag"]
    cleans = [c for c in cases if c["expect"] == "clean"]
    for c in flags:
        out, _ = sanitise_note(sanitizer, c["text"])
        if c["secret"] in out:
            misses[c["kind"]].append(masked_preview(c["text"], expected_finding(c)) if expected_finding(c) else "?")
    for c in cleans:
        _, tally = sanitise_note(sanitizer, c["text"])
        if tally.total:
            fps.append((c["kind"], ", ".join(f"{k} x{n}" for k, n in tally.secrets.items())))
    return {
        "flags": len(flags),
        "detected": len(flags) - sum(len(v) for v in misses.values()),
        "cleans": len(cleans),
        "fp_cases": len(fps),
        "misses": misses,
        "fps": fps,
    }


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


@dataclass
class Throughput:
    """One median-of-runs timing: MB per CPU-second and per wall-clock second."""

    mb_per_cpu_s: float
    mb_per_wall_s: float
    load: tuple[float, float, float]  # os.getloadavg() before the runs


def timed(fn: Callable[[str], object], texts: list[str], runs: int = 3) -> Throughput:
    total_mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    load = os.getloadavg()
    cpu, wall = [], []
    for _ in range(runs):
        c0, w0 = time.process_time(), time.perf_counter()
        for t in texts:
            fn(t)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return Throughput(total_mb / statistics.median(cpu), total_mb / statistics.median(wall), load)


def findings_on(detector: SecretDetector, texts: list[str]) -> tuple[int, Counter, Counter, list]:
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
    return n, kinds, rules, examples


def show_throughput(label: str, t: Throughput, corpus: str) -> str:
    load = "/".join(f"{x:.2f}" for x in t.load)
    return (
        f"  {label:<34} {t.mb_per_cpu_s:6.2f} MB per CPU-second, {t.mb_per_wall_s:6.2f} MB/s wall "
        f"(median of 3, {corpus}; load average {load} before)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=CORPORA / "secrets" / "cases.jsonl")
    parser.add_argument("--contested", type=Path, default=CORPORA / "secrets" / "contested.jsonl")
    parser.add_argument("--corpus", type=Path, default=CORPORA / "hugo-docs", help="Markdown tree to time")
    parser.add_argument(
        "--identity-map",
        type=Path,
        default=REPO_ROOT / "identity_map.json",
        help="identity map of the full-sanitiser timing",
    )
    parser.add_argument("--show", type=int, default=0, help="masked examples of hugo-docs findings to print per mode")
    parser.add_argument("--modes", nargs="*", choices=list(MODES), default=list(MODES))
    args = parser.parse_args()

    cases = load_jsonl(args.cases)
    contested = load_jsonl(args.contested) if args.contested.is_file() else []
    md_files = sorted(args.corpus.rglob("*.md")) if args.corpus.is_dir() else []
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in md_files]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(
        f"cases: {args.cases} ({len(cases)}), contested: {len(contested)}, "
        f"throughput corpus: {args.corpus} ({len(md_files)} .md files, {mb:.1f} MB)"
    )

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
        s = score_structured(Sanitizer(IdentityMap.empty(), detector), STRUCTURED)
        s_recall = s["detected"] / s["flags"]
        print(
            f"  structured (through the sanitiser): recall {s_recall:.3f} ({s['detected']}/{s['flags']}), "
            f"FP rate {s['fp_cases'] / s['cleans']:.3f} ({s['fp_cases']}/{s['cleans']} clean cases)"
        )
        for kind, previews in sorted(s["misses"].items()):
            print(f"    missed {kind:<28} {len(previews)}: " + "; ".join(one_line(p, 60) for p in previews))
        for kind, found in s["fps"]:
            print(f"    false positive {kind:<20} {found}")
        if texts:
            t_detector = timed(lambda t: detector.redact(t), texts)
            full = Sanitizer(
                IdentityMap.load(args.identity_map) if args.identity_map.is_file() else IdentityMap.empty(), detector
            )
            t_full = timed(lambda t: full.text(t), texts)
            print(show_throughput("detector (redact)", t_detector, args.corpus.name))
            print(show_throughput(f"sanitiser (+ {args.identity_map.name})", t_full, args.corpus.name))
            mbps = t_detector.mb_per_cpu_s
            n, kinds, rules, examples = findings_on(detector, texts)
            print(f"  {n} findings on {args.corpus.name}")
            print("  top kinds: " + ", ".join(f"{k}={v}" for k, v in kinds.most_common(10)))
            print("  top rules: " + ", ".join(f"{k}={v}" for k, v in rules.most_common(10)))
            for rule, preview in examples[: args.show]:
                print(f"      {rule:<40} {one_line(preview, 140)}")
        else:
            mbps, n = float("nan"), 0
        summary.append((mode, recall, fp_rate, s_recall, s["fp_cases"], mbps, n))

    print("\n=== summary ===")
    print(
        f"  {'mode':<12} {'recall':>7} {'FP rate':>8} {'structured recall':>18} {'structured FPs':>15} "
        f"{'MB/CPU-s':>9} {'hugo findings':>14}"
    )
    for mode, recall, fp_rate, s_recall, s_fps, mbps, n in summary:
        print(f"  {mode:<12} {recall:7.3f} {fp_rate:8.3f} {s_recall:18.3f} {s_fps:15d} {mbps:9.2f} {n:14d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
