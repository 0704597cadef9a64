"""Find and redact secrets (and e-mail addresses) in Markdown text for the Safe tier.

The sanitiser calls :meth:`SecretDetector.redact` on every chunk, title, tag and
frontmatter value of every Safe-tier note, so the detector has to be both careful
(a leaked token in the store cannot be taken back) and fast (it runs on everything).

How it works
------------
The rules are data: ``rules.toml`` holds one gitleaks/secretlint-style regex per token
family (AWS, GitHub, GitLab, Slack, Stripe, OpenAI, Google, Artifactory, Discord, ...) and
per structure (JWTs, URIs and connection strings with a password, ``curl -u``,
``Authorization:`` headers, recovery codes, e-mails), each with its redaction label, the
keywords that must occur before its regex runs, and the named check (``checks.py``) that
drops what a sanitiser must leave alone: placeholders (``<password>``, ``xxxx``,
``your-api-key-here``, ``changeme``, ``****``, ``...EXAMPLE``), environment and template
references (``${X}``, ``$X``, ``%X%``, ``$(cmd)``, ``{{ x }}``, ``!secret x``), calls and
attribute paths, type hints, hashes/UUIDs/digests/versions unless a keyword says "secret",
and public keys.  Three scanners are code and listed in the same table: private-key blocks
(``pem.py``), ``password``/``secret``/``token``/``api_key``/``PIN`` assignments in prose,
YAML, JSON, INI, TOML, XML and ``.env`` files (``generic.py``), and values named by the
structure around them: a table's column header or row label, a definition list's term, a
line's label, a frontmatter key path (``structured.py``).  ``engine.py`` compiles the
table once; ``detector.py`` merges the findings into sorted, non-overlapping spans.

The cost stays linear in the text, whatever it holds: regexes are anchored on literals with
bounded gaps, and a check that needs context reads a bounded window (``context.py``), so one
match never re-reads the text (``rag_assets_tests/test_sanitizer_linear.py``).

detect-secrets
--------------
The Artifactory and Discord-bot-token rules, and the heuristic filters applied to them
(``ds_filters.py``), are ported from detect-secrets 1.5.0 (Yelp, Apache-2.0): the library is
no longer used.  Its documented Python API scans files under process-wide settings and
returns values without offsets, and its other plugins added false positives and no recall
on the shared corpus at ~9x the time (``bench/secret_detection.py``, then ``bench/secrets.py``, before the port: detect-secrets
alone recall 0.664, FP rate 0.243; the own rules plus every plugin 1.000 and 0.029; the own
rules plus these two 1.000 and 0.000).

Known gaps, on purpose
----------------------
* Bare high-entropy strings with no keyword, prefix or structure around them are not
  flagged: in technical notes they are overwhelmingly hashes, ids and base64 data.
* A UUID or hex digest is flagged only when a keyword names it a secret
  (``api_key: <uuid>``, Heroku-style); a bare one, or one under ``id``/``sha256``, is not.
* A value split across two chunks may escape a rule that needs its surroundings
  (``password:`` at the end of one chunk); a PEM block cut by a chunk boundary is still
  redacted from its header to the end of its base64 lines.
* Personal data other than e-mail addresses (IBANs, phone numbers, names) is out of
  scope here; hosts and names are the identity map's job.
"""

from rag_assets.privacy.secrets.detector import Redaction, SecretDetector, SecretFinding
from rag_assets.privacy.secrets.engine import source_digest
from rag_assets.privacy.secrets.preview import masked_preview
from rag_assets.privacy.secrets.structured import item_path

__all__ = ["Redaction", "SecretDetector", "SecretFinding", "item_path", "masked_preview", "source_digest"]
